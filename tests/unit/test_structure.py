"""The layout of design.md, read from the code's imports: no circle, image and runs side by side, the pipeline
area and the leaves below both. The contracts are pyproject's [tool.importlinter]; import-linter reads every
import statement of src/rocmci (function-level ones too), so a lazy import cannot hide an arrow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from rocmci.cli.flags import FLAGS, flag_text
from rocmci.registry import BY_NAME
from tests.conftest import REPO


def _lint_imports() -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    if exe is None:
        pytest.fail("lint-imports is missing: install the test extra (pip install -e '.[test]')")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}  # the tree under test, not an installed rocmci
    return subprocess.run(
        [exe, "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_import_contracts_are_kept():
    done = _lint_imports()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "4 kept, 0 broken" in done.stdout, done.stdout[-2000:]


def test_every_flag_that_gives_a_setting_is_the_flag_its_messages_name():
    """settings.py names the flag of a value given by flag from the registry (it imports no CLI): the registry's
    flag and the CLI's flag table must agree, or a message names a flag that does not exist."""
    given = {f.setting: flag_text(name) for name, f in FLAGS.items() if f.setting}
    assert given, "no flag gives a setting: the table changed shape"
    assert {setting: BY_NAME[setting].flag_text for setting in given} == given
