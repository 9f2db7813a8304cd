"""yamldoc's one-line errors, exactly as a person reads them (survivors of issue 35's yamldoc mutation run).

Every unreadable input is one line, `file:line:col: what. hint`: a duplicate key where one is refused, a
mapping key that is not a scalar, a value the caller's reader refuses, a tag that does not fit, nesting
past 100 levels (by the event pass, and by libyaml's own limit), an alias bomb at exactly its bound.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from rocmci import yamldoc
from rocmci.errors import InputError

P = yamldoc.parse


def one_line(fn, *args, **kwargs) -> str:
    with pytest.raises(InputError) as err:
        fn(*args, **kwargs)
    assert err.value.exit_code == 2
    return err.value.one_line()


def test_a_refused_duplicate_names_the_first_duplicate_and_where_its_twin_is():
    assert (
        one_line(P("a: 1\nb: 2\na: 3\n", "f.yaml").refuse_duplicates)
        == "f.yaml:3:1: duplicate key 'a' (first at line 1)"
    )
    assert one_line(P("x:\n  a: 1\n  a: 2\n  b: 1\n  b: 2\n", "f.yaml").refuse_duplicates) == (
        "f.yaml:3:3: duplicate key 'a' (first at line 2)"
    )
    P("a: 1\nb: 2\n", "f.yaml").refuse_duplicates()  # none: nothing raised


def test_a_mapping_key_that_is_not_a_scalar():
    assert one_line(P, "? [a]\n: 1\n", "f.yaml") == "f.yaml:1:3: a mapping key must be a scalar"
    assert one_line(P, "base: &k [a]\nm:\n  ? *k\n  : 1\n", "f.yaml") == "f.yaml:1:7: a mapping key must be a scalar"


def _refuse(text: str):
    raise ValueError(f"refused {text!r}")


def test_a_value_or_key_the_callers_reader_refuses_is_one_line_at_it():
    assert one_line(P, "a: 1\nv: x\n", "f.yaml", plain=_refuse, plain_key=str) == "f.yaml:1:4: refused '1'"
    assert one_line(P, "k: v\n", "f.yaml", plain=str, plain_key=_refuse) == "f.yaml:1:1: refused 'k'"


def test_plain_reading_keeps_a_merge_key_merging_and_every_other_scalar_as_written():
    doc = P("base: &b {x: 1}\nm:\n  <<: *b\n  y: <<\n", "f.yaml", plain=lambda s: f"<{s}>", plain_key=str)
    assert doc.data == {"base": {"x": "<1>"}, "m": {"y": "<<", "x": "<1>"}}
    assert P("a: '1'\n", "f.yaml", plain=lambda s: 0, plain_key=str).data == {"a": "1"}  # quoted: text


@pytest.mark.parametrize(
    ("value", "shown"),
    [("x" * 40, "x" * 40), ("x" * 41, "x" * 37 + "..."), ("x" * 50, "x" * 37 + "...")],
    ids=["40", "41", "50"],
)
def test_a_value_that_does_not_fit_its_tag_is_shown_up_to_40_characters(value, shown):
    assert one_line(P, f"v: !!int {value}\n", "f.yaml") == (
        f"f.yaml:1:4: '{shown}' is not a valid !!int value. fix the value or remove the tag"
    )


def test_an_unsupported_tag_says_how_values_are_read():
    assert one_line(P, "v: !!binary aGVsbG8=\n", "f.yaml") == (
        "f.yaml:1:4: the YAML tag !!binary is not supported. "
        "remove the tag: values are read as text, numbers, true/false or null"
    )


LONG_LINE = "x: " + "y" * 2001 + "\n"  # makes the event pass run (a line longer than 2,000 characters)


def test_nesting_past_100_levels_is_one_line_by_the_event_pass_and_by_libyamls_own_limit():
    assert yamldoc._could_nest_deeply(LONG_LINE)
    deep = "a: " + "[" * 101 + "]" * 101 + "\n"
    assert (
        one_line(P, LONG_LINE + deep, "f.yaml") == "f.yaml:2:104: nested deeper than 100 levels. flatten the document"
    )
    P(LONG_LINE + "a: " + "[" * 100 + "]" * 100 + "\n", "f.yaml")  # 100 levels: fine
    # Many collections that open and close: only the open ones count.
    P("a:\n" + "- [[x]]\n" * 2100 + "b: " + "[" * 100 + "]" * 100 + "\n", "f.yaml")
    # libyaml's scanner stops at 1,000 levels on its own before any event: the same line, at its column.
    assert one_line(P, "a: " + "[" * 40_000 + "]" * 40_000, "f.yaml") == (
        "f.yaml:1:1003: nested deeper than 100 levels. flatten the document"
    )


def test_a_syntax_error_in_a_document_the_event_pass_reads_stays_a_syntax_error():
    assert one_line(P, LONG_LINE + "a: b: c\n", "f.yaml") == (
        "f.yaml:2:5: invalid YAML: mapping values are not allowed in this context"
    )
    assert one_line(P, LONG_LINE + "a: [\n", "f.yaml") == (
        "f.yaml:3:1: invalid YAML: while parsing a flow node, did not find expected node content"
    )


def _aliased(references: int, items: int = 99) -> str:
    """One anchored list of `items` scalars and `references` aliases to it: each expands to items + 1 nodes."""
    return "base: &a [" + ", ".join(["1"] * items) + "]\nrefs: [" + ", ".join(["*a"] * references) + "]\n"


def test_aliases_may_expand_to_exactly_100000_nodes_and_not_one_more():
    assert yamldoc.MAX_ALIAS_NODES == 100_000
    assert len(P(_aliased(1000), "f.yaml").data["refs"]) == 1000  # 1,000 x 100 nodes: the bound itself
    assert one_line(P, _aliased(1001), "f.yaml") == (
        "f.yaml:1:7: YAML aliases expand to more than 100000 nodes. "
        "an alias bomb? write the values out or use fewer nested aliases"
    )
    keys = "base: &k {a: 1}\nrefs: [" + ", ".join(["*k"] * 50_001) + "]\n"  # an alias's keys count too
    assert "YAML aliases expand to more than 100000 nodes" in one_line(P, keys, "f.yaml")


def test_a_mapping_merged_where_it_is_written_is_no_alias_and_one_merged_through_an_alias_is():
    # Only nodes reached through an alias count toward the bound: an inline `<<: {...}` is read once, as written.
    pairs = ", ".join(f"k{i}: {i}" for i in range(50_001))  # 100,003 nodes with the mapping itself
    assert len(P(f"m:\n  <<: {{{pairs}}}\n  own: 1\n", "f.yaml").data["m"]) == 50_002
    anchored = f"base: &b {{{pairs}}}\nm:\n  <<: *b\n"
    assert "YAML aliases expand to more than 100000 nodes" in one_line(P, anchored, "f.yaml")


def test_positions_fall_back_to_the_nearest_ancestor_and_the_start():
    doc = P("a:\n  b: [1, 2]\n", "f.yaml")
    assert doc.pos(("a", "b", 1)) == (2, 10)
    assert doc.pos(("a", "b", 7, "x")) == (2, 3)  # no such item: its list's key
    assert doc.pos(("a", "b", "zz")) == (2, 3)  # one level up, not two
    assert doc.pos(("nope",)) == (1, 1) and doc.pos(()) == (1, 1)
    assert P("", "f.yaml").pos(("a", 0)) == (1, 1) and P("# only a comment\n", "f.yaml").where(("a",)) == "f.yaml:1:1"
    assert doc.where(("a", "b", 0)) == "f.yaml:2:7"


def test_load_names_the_file_as_displayed(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("a: !!int x\n")
    assert one_line(yamldoc.load, path, "shown.yaml") == (
        "shown.yaml:1:4: 'x' is not a valid !!int value. fix the value or remove the tag"
    )
    assert one_line(yamldoc.load, tmp_path / "missing.yaml", "shown.yaml", what="--source") == (
        "shown.yaml: no such file (from --source)"
    )
    assert one_line(yamldoc.load, tmp_path / "missing.yaml") == f"{tmp_path / 'missing.yaml'}: no such file"


def test_a_huge_integer_says_to_quote_it():
    assert one_line(P, "a:\n  n: " + "9" * 22 + "\n", "f.yaml") == (
        "f.yaml:2:6: a 22-character integer is too large (the limit is 21 characters). quote it to keep it as text"
    )


@pytest.mark.parametrize("value", ["0x1F", "0o17", "-0b1", "+0x1"])
def test_a_prefixed_integer_tagged_float_is_one_line_not_a_traceback(value):
    """serde_yaml reads `!!float` with Rust's float parser, which takes no 0x/0o/0b: unreadable input, one line.
    (It was a ValueError traceback: ints were let through to float().)"""
    assert one_line(P, f"v: !!float {value}\n", "f.yaml") == (
        f"f.yaml:1:4: '{value}' is not a valid !!float value. fix the value or remove the tag"
    )
    assert P("v: !!float 2\n", "f.yaml").data["v"] == 2.0  # a decimal integer is a float's spelling too


@pytest.mark.parametrize(("text", "value"), [("true", True), ("True", True), ("TRUE", True), ("FALSE", False)])
def test_every_core_spelling_of_a_tagged_bool(text, value):
    assert P(f"v: !!bool {text}\n", "f.yaml").data["v"] is value


def test_text_reached_through_an_alias_counts_toward_the_bound_too():
    items = ", ".join(["a"] * 99)
    listed = f"base: &a [{items}]\nrefs: [" + ", ".join(["*a"] * 1001) + "]\n"
    assert "YAML aliases expand to more than 100000 nodes" in one_line(P, listed, "f.yaml")
    # a mapping of 99 text entries is 199 nodes through an alias (itself, keys, values): 600 of them pass the bound
    mapped = "base: &m {" + ", ".join(f"k{i}: v" for i in range(99)) + "}\nrefs: [" + ", ".join(["*m"] * 600) + "]\n"
    assert "YAML aliases expand to more than 100000 nodes" in one_line(P, mapped, "f.yaml")


def test_a_merge_key_merges_a_list_of_mappings_the_first_winning():
    text = "a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\nm:\n  <<: [*a, *b]\n  z: 3\n"
    assert P(text, "f.yaml").data["m"] == {"x": 1, "y": 1, "z": 3}


def test_a_merge_of_something_that_is_not_a_mapping_is_one_line_at_it():
    assert one_line(P, "a: 1\nm:\n  <<: [1]\n", "f.yaml") == "f.yaml:3:8: '<<' must merge a mapping"
    assert one_line(P, "m:\n  <<: x\n", "f.yaml") == "f.yaml:2:7: '<<' must merge a mapping"


@pytest.mark.parametrize("opener", ["[", "{", "{a: "])
def test_flow_nesting_over_many_short_lines_is_one_line_not_a_crash(opener):
    """40,000 levels, one per line: no line is long, so only the count of '[' and '{' sends the document to the
    event pass. Without it libyaml's recursive composer overflows the C stack: a child process, so that such a
    regression fails this test instead of killing the test run."""
    code = (
        "from rocmci import yamldoc\n"
        "from rocmci.errors import InputError\n"
        f"text = 'a: ' + {opener + chr(10)!r} * 40000\n"
        "try:\n    yamldoc.parse(text, 'f.yaml')\nexcept InputError as exc:\n    print(exc.one_line())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, "f.yaml:101:1: nested deeper than 100 levels. flatten the document\n")


@pytest.mark.parametrize(
    ("data", "line"),
    [
        (b"\xff\xfea\x00", "f.yaml: UTF-16 text, not UTF-8. save the file as UTF-8"),
        (b"\xfe\xff\x00a", "f.yaml: UTF-16 text, not UTF-8. save the file as UTF-8"),
        (b"a: 1\n\x00", "f.yaml: binary file, not YAML"),
        (b"a: \xe9\n", "f.yaml: not UTF-8 (byte 3). save the file as UTF-8"),
        (b"a: 1\nb: x\x07y\n", "f.yaml:2:5: invalid YAML: control character #x0007 is not allowed"),
        (b"x" * 8192 + b"\x00", "f.yaml:1:8193: invalid YAML: control character #x0000 is not allowed"),  # past 8 KiB
    ],
    ids=["utf-16-le", "utf-16-be", "nul", "latin-1", "bell", "nul-past-8k"],
)
def test_bytes_that_are_not_yaml_text_are_one_line(data, line):
    assert one_line(P, data, "f.yaml") == line
    assert P(b"a: 1\n", "f.yaml").data == {"a": 1}


def test_parsing_leaves_the_garbage_collector_as_it_found_it():
    import gc

    assert gc.isenabled()
    P("a: [1, 2]\n", "f.yaml")
    assert gc.isenabled()
    with pytest.raises(InputError):
        P("a: [\n", "f.yaml")
    assert gc.isenabled()


def test_nesting_after_a_closed_collection_is_counted_from_its_real_depth():
    """100 levels, one closed, then 890 more on one long line (the event pass reads it): the refusal names the
    collection at level 101 counted from the root, the third one opened after the close (survivors
    `_refuse_deep_nesting` 25 and 27: the depth reset to 1, or lowered by 2, after a closing bracket)."""
    text = "[" * 100 + "], " + "[" * 890 + "]" * 890 + "]" * 99 + "\n"
    with pytest.raises(InputError) as refused:
        yamldoc.parse(text.encode(), "deep.yaml")
    assert str(refused.value) == "deep.yaml:1:106: nested deeper than 100 levels. flatten the document"


def test_a_control_character_is_placed_by_the_lines_before_it_only():
    # Lines after it and a blank first line must not move it: line 4, column 5 of this text.
    text = "\na: 1\nb: 2\nc: x\x07y\nd: 4\ne: 5\nf: 6\n"
    assert one_line(P, text, "f.yaml") == "f.yaml:4:5: invalid YAML: control character #x0007 is not allowed"
    # Right after the blank first line: its column counts from that line's start, not the file's.
    assert one_line(P, "\nx\x07\n", "f.yaml") == "f.yaml:2:2: invalid YAML: control character #x0007 is not allowed"


def test_the_roots_position_is_where_its_content_starts():
    assert P("# a comment\n\n- a\n", "f.yaml").pos(()) == yamldoc.Pos(3, 1)


def _merging(lists: int) -> str:
    """An anchored mapping whose `k` holds `lists` nested lists, merged two mappings deep under `m`."""
    return "x: &a {k: " + "[" * lists + "]" * lists + "}\nm: {n: {<<: *a}}\n"


def test_a_merged_mapping_is_nested_where_it_is_merged():
    # Merged under m.n (depth 3), k's 97 lists reach depth 100, the bound; 98 go past it, though the anchor's own
    # copy (depth 2) stays within it.
    P(_merging(97), "f.yaml")
    assert one_line(P, _merging(98), "f.yaml") == "f.yaml:1:108: nested deeper than 100 levels. flatten the document"


UNSUPPORTED_TAG_HINT = ". remove the tag: values are read as text, numbers, true/false or null"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("v: !!str [a]\n", "f.yaml:1:4: the YAML tag !!str is not supported" + UNSUPPORTED_TAG_HINT),
        ("v: !!str {a: 1}\n", "f.yaml:1:4: the YAML tag !!str is not supported" + UNSUPPORTED_TAG_HINT),
        ("- !!str [a]\n", "f.yaml:1:3: the YAML tag !!str is not supported" + UNSUPPORTED_TAG_HINT),
        ("? !!str [a]\n: 1\n", "f.yaml:1:3: a mapping key must be a scalar"),
    ],
    ids=["value-sequence", "value-mapping", "item", "key"],
)
def test_a_text_tag_on_a_collection_is_one_line_at_it(text, line):
    # `!!str` names a scalar's type: on a list or a mapping it is refused, never read as the nodes inside.
    assert one_line(P, text, "f.yaml") == line
