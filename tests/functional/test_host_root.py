"""--host-root names a folder: a file there is one line naming the flag, from doctor and the run tasks alike.

Before, a FIFO or file given as --host-root passed the flag and failed later under it, as
"KFD sysfs '<the first 60 characters of a path below it>': Not a directory": with a long path, neither
the flag nor the file at fault could be seen.
"""

from __future__ import annotations

import os

import pytest

from tests.functional.test_guards_cli import rocmci


@pytest.mark.parametrize(
    "task", ["doctor", "run.moe-tests", "run.dp-example"], ids=lambda t: t.replace(".", "-")
)
@pytest.mark.parametrize("kind", ["file", "fifo"])
def test_a_host_root_that_is_not_a_folder_is_one_line_naming_the_flag(tmp_path, task, kind):
    root = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(root)
    else:
        root.write_text("not a folder\n")
    extra = ["--dry-run", "--skip-preflight"] if task.startswith("run.") else []
    done = rocmci(task, "--host-root", str(root), *extra)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [f"rocmci: --host-root {str(root)[:60]!r} is not a folder. give a folder"]


def test_a_missing_host_root_is_a_host_without_gpus(tmp_path):
    """A folder that does not exist reads as a host with no AMD GPU (doctor says so), not as bad input."""
    done = rocmci("doctor", "--host-root", str(tmp_path / "absent"), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"no AMD GPU on this host (nothing in {tmp_path / 'absent'}" in done.stdout
