"""The pre-commit hook (`rocmci-validate`, src/rocmci/hook.py) in process: what vLLM's developers see from it.

Issue 35's promise "the hook fails when any file has errors" is in test_guard_validation.py; the tests here
pin the rest of the hook's face that `nox -s mutants` found unguarded in process (the functional
test_hook.py runs it as a child and is left out of mutation runs): its help and version, --arch and
--mirror-hw reaching the generator, the --json document for a file that cannot be read, a broken setting.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from rocmci import __version__, hook
from tests.conftest import REPO

DATA = REPO / "tests" / "data" / "pipeline" / "source"

HELP = """\
usage: rocmci-validate [-h] [--arch ARCH] [--mirror-hw MIRROR_HW] [--json]
                       [--version]
                       FILE [FILE ...]

rocmci-validate FILE...: the pre-commit hook for vLLM's repository (.pre-
commit-hooks.yaml).

positional arguments:
  FILE                  vLLM-style step files (.buildkite/test-amd.yaml)

options:
  -h, --help            show this help message and exit
  --arch ARCH           archs the image's DeepEP is built for (default: the
                        'arch' setting)
  --mirror-hw MIRROR_HW
                        mirror_hardwares value to generate for (default: the
                        'mirror_hw' setting)
  --json                print one JSON document for all files
  --version             show the version and exit
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("ROCMCI_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps help to the terminal's width
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _exit(*argv: str) -> int:
    with pytest.raises(SystemExit) as ended:
        hook.main(list(argv))
    return ended.value.code


def test_help_and_version(capsys):
    assert _exit("--help") == 0
    assert capsys.readouterr().out == HELP
    assert _exit("--version") == 0
    assert capsys.readouterr().out == f"rocmci-validate {__version__}\n"
    assert _exit("--version", "--json", "x.yaml") == 0  # --version takes no value and wins over the rest
    assert capsys.readouterr().out == f"rocmci-validate {__version__}\n"
    assert _exit() == 2  # a file is required
    assert "the following arguments are required: FILE" in capsys.readouterr().err


def test_arch_reaches_the_deepep_rule(clean_env, capsys):
    shutil.copyfile(DATA / "invalid" / "deepep-wrong-arch.yaml", "s.yaml")
    assert hook.main(["--arch", "gfx942;gfx950", "s.yaml"]) == 1
    assert "but the image's DeepEP is built for gfx942;gfx950;" in capsys.readouterr().out
    # DeepEP cannot be built for the MI250's gfx90a: that list is refused, as the image tasks refuse it
    assert hook.main(["--arch", "gfx90a", "s.yaml"]) == 2
    assert "DeepEP on ROCm cannot target gfx90a" in capsys.readouterr().err
    Path("s.yaml").write_text(Path("s.yaml").read_text().replace("mi250_2", "mi355_2"))
    assert hook.main(["--arch", "gfx942", "s.yaml"]) == 1
    assert "but the image's DeepEP is built for gfx942;" in capsys.readouterr().out
    assert hook.main(["--arch", "gfx950", "s.yaml"]) == 0
    assert capsys.readouterr().out == "s.yaml: 0 errors, 0 warnings in 5 generated steps\n"


def test_mirror_hw_reaches_the_generator(clean_env, capsys):
    shutil.copyfile(DATA / "invalid" / "no-step-for-mirror.yaml", "s.yaml")
    assert hook.main(["--arch", "gfx942", "s.yaml"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "s.yaml: 0 errors, 1 warning in 4 generated steps"
    assert hook.main(["--arch", "gfx942", "--mirror-hw", "amdexperimental", "s.yaml"]) == 0
    assert capsys.readouterr().out == "s.yaml: 0 errors, 0 warnings in 5 generated steps\n"


def test_json_names_a_file_that_cannot_be_read_and_sums_the_rest(clean_env, capsys):
    shutil.copyfile(DATA / "invalid" / "unknown-key.yaml", "bad.yaml")
    shutil.copyfile(DATA / "invalid" / "no-step-for-mirror.yaml", "warn.yaml")
    assert hook.main(["--json", "--arch", "gfx942", "missing.yaml", "bad.yaml", "warn.yaml"]) == 2
    got = capsys.readouterr()
    data = json.loads(got.out)
    missing, bad, warn = data["files"]
    assert missing == {
        "file": "missing.yaml",
        "error": "missing.yaml: no such file (from --source)",
        "exit_code": 2,
    }
    assert (bad["file"], bad["errors"], warn["file"], warn["errors"], warn["warnings"]) == (
        "bad.yaml", 3, "warn.yaml", 0, 1,
    )  # fmt: skip
    assert (data["errors"], data["warnings"]) == (3, 1)
    assert list(data) == ["files", "errors", "warnings"]
    assert got.out == json.dumps(data, indent=2) + "\n"
    assert got.err == "rocmci-validate: missing.yaml: no such file (from --source)\n"


def test_a_broken_setting_is_one_line_and_exit_2(clean_env, capsys, monkeypatch):
    monkeypatch.setenv("ROCMCI_BOGUS", "1")
    assert hook.main(["x.yaml"]) == 2
    got = capsys.readouterr()
    assert got.out == ""
    assert got.err == (
        "rocmci-validate: unknown setting in environment variable ROCMCI_BOGUS. did you mean 'ROCMCI_WORKAROUNDS'?\n"
    )


def test_an_error_line_quoting_a_path_is_escaped(clean_env, capsys):
    """A file name is text from outside: an escape or a bidi override in it reaches stderr as text."""
    assert hook.main(["x\x1b[2J\u202e.yaml"]) == 2
    assert capsys.readouterr().err == "rocmci-validate: x\\e[2J\\u202e.yaml: no such file (from --source)\n"
