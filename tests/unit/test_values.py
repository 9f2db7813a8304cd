"""values.parse_int, the one parser of numbers from outside, and values.shown, which keeps error lines short."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rocmci import values
from rocmci.errors import UsageError
from rocmci.values import MAX_INT_DIGITS, parse_int, shown


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", 0), ("7", 7), (" 12 ", 12), ("+3", 3), ("-255", -255), ("9" * 18, int("9" * 18)), (5, 5), (-1, -1)],
)
def test_whole_numbers_in_ascii_digits_are_read(text, expected):
    assert parse_int(text, "--tp") == expected


@pytest.mark.parametrize(
    "text",
    [
        "²",  # str.isdigit() is true, int() refuses it: the old `isdigit() then int()` crashed here
        "١٠",  # int() reads Arabic-Indic digits; a number from outside is ASCII
        "1_000",  # int() reads the underscore
        "0x10", "1e3", "2.9", "inf", "", " ", "+", "-", "--1", "1 2", "\x00", "7\n8",
        True, 2.0, None, [1],
    ],
)  # fmt: skip
def test_anything_else_is_one_usage_line_naming_the_source(text):
    with pytest.raises(UsageError) as err:
        parse_int(text, "VLLM_CI_EXPECTED_GPU_COUNT")
    line = err.value.one_line()
    assert line.startswith("VLLM_CI_EXPECTED_GPU_COUNT must be a whole number") and "\n" not in line


def test_long_numbers_are_refused_by_length_before_int_sees_them():
    # 5,000 digits is past Python's int-string limit (4,300): int() would raise ValueError, not a UsageError.
    for digits in (MAX_INT_DIGITS + 1, 5000, 10**6):
        with pytest.raises(UsageError) as err:
            parse_int("9" * digits, "-tp")
        assert err.value.one_line() == f"-tp is a {digits}-digit number; numbers here have at most 18 digits"
    assert parse_int("-" + "9" * MAX_INT_DIGITS, "x") == -int("9" * MAX_INT_DIGITS)


def test_bounds_are_checked_and_named():
    assert parse_int("4", "--dp", low=1, high=8) == 4
    with pytest.raises(UsageError, match="^--dp must be between 1 and 8, got 9$"):
        parse_int("9", "--dp", low=1, high=8)
    with pytest.raises(UsageError, match="^GPUs must be at least 0, got -1$"):
        parse_int(-1, "GPUs", low=0)
    with pytest.raises(UsageError, match="^x must be at most 3, got 4$"):
        parse_int("4", "x", high=3)


def test_bounded_int_is_parse_int_for_flags():
    assert values.bounded_int("--shards", "2", 1, 32) == 2
    with pytest.raises(UsageError, match="--shards must be between 1 and 32, got 0"):
        values.bounded_int("--shards", "0", 1, 32)


@settings(max_examples=300, derandomize=True, database=None)
@given(st.one_of(st.text(max_size=30), st.text(alphabet="0123456789+- _²١.", max_size=25), st.integers()))
@example("9" * 5000)
@example("²")
def test_any_text_is_a_number_equal_to_int_or_one_bounded_line(text):
    try:
        number = parse_int(text, "value")
    except UsageError as exc:
        line = exc.one_line()
        assert "\n" not in line and len(line) < 200
        return
    if isinstance(text, int):
        assert number == text
    else:
        stripped = text.strip()
        assert stripped.lstrip("+-").isascii() and stripped.lstrip("+-").isdigit()
        assert number == int(stripped) and len(stripped.lstrip("+-")) <= MAX_INT_DIGITS


def test_shown_cuts_any_value_to_sixty_characters():
    assert shown("gfx942") == "'gfx942'"
    for text in ("x" * 10**6, "\x1b[2J" * 1000, "é" * 100):
        assert len(shown(text)) <= 60 and shown(text).endswith("...")


def test_numbers_already_parsed_get_the_same_bound():
    # A TOML or YAML reader hands over an int; one of 4,000 digits could not even be printed in an error.
    assert parse_int(10**18 - 1, "x") == 10**18 - 1
    for number in (10**18, -(10**18), 10**4000):
        with pytest.raises(UsageError, match="^run_timeout is a number of over 18 digits$"):
            parse_int(number, "run_timeout")


# Every site that reads a number from outside goes through parse_int. Each of these raised ValueError (a
# traceback) for '²' (str.isdigit() is true) or 5,000 digits (past int()'s limit) before.


@pytest.mark.parametrize("raw", ["²", "9" * 5000, "-1", "two"])
def test_the_host_gpu_count_from_the_environment(raw):
    from rocmci.runs.workloads import expected_gpu_count

    with pytest.raises(UsageError) as err:
        expected_gpu_count({"VLLM_CI_EXPECTED_GPU_COUNT": raw})
    line = err.value.one_line()
    assert line.startswith("VLLM_CI_EXPECTED_GPU_COUNT ") and len(line) < 200
    assert expected_gpu_count({"VLLM_CI_EXPECTED_GPU_COUNT": "8"}) == 8
    assert expected_gpu_count({}) is None


@pytest.mark.parametrize(("columns", "width"), [("²", 80), ("9" * 5000, 80), ("0", 80), ("-5", 80), ("120", 120)])
def test_the_terminal_width_from_columns(columns, width):
    import io

    from rocmci import report

    assert report._terminal_width(io.StringIO(), {"COLUMNS": columns}) == width


def test_a_settings_number_from_the_environment_or_toml():
    from rocmci import settings as settingsmod

    setting = settingsmod.BY_NAME["run_timeout"]
    for raw in ("²", "9" * 5000, 10**4000, True, "1_0"):
        with pytest.raises(UsageError, match="setting 'run_timeout' from env X must be an integer"):
            settingsmod.convert(setting, raw, "env X")
    assert settingsmod.convert(setting, " 90 ", "env X") == 90
