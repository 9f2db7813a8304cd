from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rocmci import errors, files
from rocmci.errors import InputError, UsageError
from rocmci.files import read_lines, write_atomic


def test_write_replaces_whole_files(tmp_path):
    path = tmp_path / "sub" / "out.yaml"
    write_atomic(path, "one\n")
    write_atomic(path, "two\n")
    assert path.read_text() == "two\n"
    assert [p.name for p in path.parent.iterdir()] == ["out.yaml"]


def test_a_failure_mid_write_keeps_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "out.yaml"
    path.write_text("old\n")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(InputError, match="out.yaml: cannot write: No space left on device"):
        write_atomic(path, "new\n" * 1000)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_interrupt_during_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "out.yaml"
    path.write_text("old\n")
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_unwritable_folder_is_an_input_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="a part of the path is not a folder"):
        write_atomic(blocker / "out.yaml", "x")


def test_read_lines_skips_blanks_and_comments(tmp_path):
    path = tmp_path / "changed.txt"
    path.write_text("a/b.py\n\n  # comment\n c/d.py \n")
    assert read_lines(path) == ("a/b.py", "c/d.py")
    with pytest.raises(InputError, match="no such file"):
        read_lines(tmp_path / "none")


# --- reading: one way to open an input -------------------------------------------------------------


@pytest.fixture
def alarm():
    """Fail instead of hanging forever if a read blocks."""
    old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("a read blocked"))
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_read_refuses_non_regular_files_without_blocking(tmp_path, alarm):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    loop = tmp_path / "a"
    loop.symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(loop)
    cases = {
        fifo: "is a FIFO (named pipe), not a regular file",
        tmp_path: "is a directory, not a regular file",
        Path("/dev/zero"): "is a character device, not a regular file",
        Path("/dev/null"): "is a character device, not a regular file",
        loop: "is a symlink loop",
        tmp_path / "none": "no such file",
        tmp_path / "none" / "x": "no such file",
        fifo / "x": "a part of the path is not a folder",
        tmp_path / ("n" * 300): "the path is too long",
    }
    for path, message in cases.items():
        with pytest.raises(InputError, match=re.escape(message)) as err:
            files.read_bytes(path, what="--source")
        line = err.value.one_line()
        assert line.startswith(f"{path}: ") and "(from --source)" in line and "\n" not in line
        assert err.value.exit_code == 2


def test_read_refuses_bad_path_text():
    with pytest.raises(InputError, match="the path contains a NUL character"):
        files.read_bytes("a\0b", what="--junit")
    with pytest.raises(InputError, match="the path is not valid text"):
        files.read_bytes("\ud800x", what="--junit")
    with pytest.raises(InputError, match="the path is empty"):
        files.read_bytes("", what="--junit")


def test_read_counts_bytes_read_not_the_size_stat_reports(tmp_path):
    # /proc files say st_size 0 and still have content: the reader reads until EOF.
    status = files.read_text("/proc/self/status")
    assert os.stat("/proc/self/status").st_size == 0 and "Umask:" in status
    path = tmp_path / "big"
    path.write_bytes(b"x" * 101)
    assert files.read_bytes(path, limit=101) == b"x" * 101
    with pytest.raises(InputError, match="is larger than the limit of 100 bytes"):
        files.read_bytes(path, limit=100)


def test_read_text_refuses_non_utf8(tmp_path):
    path = tmp_path / "latin1"
    path.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1: not UTF-8 \(byte 3\) \(from --changed-files\)"):
        files.read_text(path, what="--changed-files")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to drop to another user")
def test_unreadable_file_is_one_line_for_another_user(tmp_path):
    """Root reads everything, so the child drops to nobody (a real permission check, no mock)."""
    secret = tmp_path / "secret.yaml"
    secret.write_text("a: 1\n")
    secret.chmod(0o600)
    tmp_path.chmod(0o755)
    src = Path(files.__file__).parents[1]
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]); from rocmci.files import read_bytes; "
        "from rocmci.errors import InputError\n"
        "try: read_bytes(sys.argv[1], what='--pipeline')\n"
        "except InputError as e: print(e.one_line())"
    )
    python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", code, str(secret), str(src)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if "Permission denied" in done.stderr and "rocmci" not in done.stdout:
        pytest.skip(f"nobody cannot run python here: {done.stderr.strip()[-200:]}")
    assert done.stdout.strip() == f"{secret}: permission denied (from --pipeline)", done.stderr


# --- writing ------------------------------------------------------------------------------------------


def test_write_keeps_the_mode_of_an_existing_file(tmp_path):
    path = tmp_path / "out.yaml"
    for mode in (0o644, 0o755, 0o600):
        path.write_text("old\n")
        path.chmod(mode)
        write_atomic(path, "new\n")
        assert stat.S_IMODE(path.stat().st_mode) == mode and path.read_text() == "new\n"


def test_a_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomic(tmp_path / "new.yaml", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.yaml").stat().st_mode) == 0o640


def test_write_goes_through_a_symlink_and_keeps_it(tmp_path):
    target = tmp_path / "real" / "pipeline.yaml"
    target.parent.mkdir()
    target.write_text("old\n")
    target.chmod(0o644)
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    assert write_atomic(link, "new\n") == target
    assert link.is_symlink() and target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in target.parent.iterdir()) == ["pipeline.yaml"]
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "made.yaml")
    write_atomic(dangling, "made\n")
    assert dangling.is_symlink() and (tmp_path / "made.yaml").read_text() == "made\n"


def test_write_refuses_loops_and_non_regular_targets(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(InputError, match="loop: is a symlink loop"):
        write_atomic(loop, "x")
    with pytest.raises(InputError, match="is a directory, not a regular file.*leave --out out to write to stdout"):
        write_atomic(tmp_path, "x")
    with pytest.raises(InputError, match="/dev/null: is a character device"):
        write_atomic("/dev/null", "x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is a FIFO"):
        write_atomic(fifo, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "loop"]


def test_write_refuses_an_input_as_output(tmp_path):
    source = tmp_path / "test-amd.yaml"
    source.write_text("steps: []\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(source)
    hard = tmp_path / "hard.yaml"
    os.link(source, hard)
    for out in (source, link, hard):
        with pytest.raises(UsageError, match=r"is the same file as --source .*test-amd.yaml") as err:
            write_atomic(out, "pipeline", inputs={"--source": source, "--changed-files": None})
        assert err.value.exit_code == 2
    assert source.read_text() == "steps: []\n"
    write_atomic(tmp_path / "other.yaml", "pipeline", inputs={"--source": source})


def test_write_refuses_a_file_this_process_read_even_unlisted(tmp_path):
    source = tmp_path / "steps.yaml"
    source.write_text("steps: []\n")
    files.read_bytes(source, what="--source")
    with pytest.raises(UsageError, match=r"a file this command read as input \(--source .*steps.yaml\)"):
        write_atomic(source, "pipeline")
    assert source.read_text() == "steps: []\n"
    # A file rocmci replaced is a new file: writing it again is fine.
    out = tmp_path / "out.yaml"
    write_atomic(out, "1")
    write_atomic(out, "2")
    assert out.read_text() == "2"


def test_sigterm_during_a_write_removes_the_temporary_file(tmp_path, monkeypatch):
    """A real SIGTERM to this process in the middle of the write, with the handler tasks.py installs."""
    path = tmp_path / "out.yaml"
    path.write_text("old\n")
    previous = signal.getsignal(signal.SIGTERM)
    errors.raise_on_sigterm()
    monkeypatch.setattr(os, "fsync", lambda fd: os.kill(os.getpid(), signal.SIGTERM))
    try:
        with pytest.raises(errors.Terminated):
            write_atomic(path, "new\n" * 10000)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_tasks_report_sigterm_with_one_line_and_143(monkeypatch):
    from invoke import Exit

    from rocmci.cli import edge

    def terminated_midway(**kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not interrupt")  # pragma: no cover

    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(Exit) as err:
            edge.run(terminated_midway)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert err.value.code == 143 and err.value.message == "rocmci: terminated"


# --- issue 22: bounded TOML, output folders that cannot be used, NULs in path lists -----------------------


def test_toml_long_integers_and_deep_nesting_are_one_line_each():
    cases = {
        "[tool.rocmci]\nrun_timeout = " + "9" * 5000 + "\n": "pyproject.toml:2:15: a 5000-digit integer is too large",
        "x = " + "[" * 5000 + "]" * 5000 + "\n": "pyproject.toml: arrays or tables nested too deeply to read",
        "x = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n": "pyproject.toml: arrays or tables nested too deeply",
        "[tool.rocmci\n": "pyproject.toml:1:13: invalid TOML: Expected ']'",
    }
    for text, message in cases.items():
        with pytest.raises(InputError) as err:
            files.parse_toml(text, "pyproject.toml")
        assert err.value.one_line().startswith(message) and "\n" not in err.value.one_line()
    assert files.parse_toml("x = " + "9" * 18 + "\n", "p")["x"] == int("9" * 18)


@pytest.mark.parametrize("kernel", ["/proc/rocmci-results", "/sys/rocmci-results", "/proc/self", "/sys"])
def test_an_output_folder_under_proc_or_sys_is_refused_before_anything_is_made(kernel):
    with pytest.raises(InputError) as err:
        files.prepare_folder(kernel, "setting results_dir, ROCMCI_RESULTS_DIR")
    line = err.value.one_line()
    assert "a kernel file system" in line and line.endswith("(from setting results_dir, ROCMCI_RESULTS_DIR)")
    assert not os.path.exists("/proc/rocmci-results") and not os.path.exists("/sys/rocmci-results")


def test_an_output_folder_that_is_a_file_or_under_one_names_the_setting(tmp_path):
    (tmp_path / "file").write_text("keep\n")
    (tmp_path / "kernel").symlink_to("/proc")
    cases = {
        tmp_path / "file": "is a file, not a folder (from ROCMCI_RESULTS_DIR)",
        tmp_path / "file" / "sub": "cannot make the folder: Not a directory (from ROCMCI_RESULTS_DIR)",
        tmp_path / "kernel" / "x": "is under /proc, a kernel file system",  # through a symlink
    }
    for path, message in cases.items():
        with pytest.raises(InputError, match=re.escape(message)):
            files.prepare_folder(path, "ROCMCI_RESULTS_DIR")
    assert (tmp_path / "file").read_text() == "keep\n"
    made = files.prepare_folder(tmp_path / "a" / "b", "ROCMCI_RESULTS_DIR")
    assert made.is_dir() and list(made.iterdir()) == []  # the probe file is gone


def test_an_output_folder_that_takes_no_bytes_is_found_before_the_run(tmp_path):
    # What a full disk does to a write, without filling one: RLIMIT_FSIZE makes every write past 1 byte EFBIG.
    code = (
        "import resource, signal, sys\n"
        "from rocmci import files\n"
        "from rocmci.errors import InputError\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1, 1))\n"
        "try:\n"
        f"    files.prepare_folder({str(tmp_path / 'full')!r}, 'ROCMCI_RESULTS_DIR')\n"
        "except InputError as exc:\n"
        "    print(exc.one_line())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.strip().endswith("full: cannot write: File too large (from ROCMCI_RESULTS_DIR)"), done
    assert list((tmp_path / "full").iterdir()) == []


def test_a_refused_output_is_named_by_its_own_flag(tmp_path):
    (tmp_path / "dir").mkdir()
    with pytest.raises(InputError) as err:
        write_atomic(tmp_path / "dir", "x", what="--annotation")
    assert err.value.one_line().endswith("is a directory, not a regular file (from --annotation). give a file path")
    with pytest.raises(InputError, match=r"\(from --out\)\. leave --out out to write to stdout"):
        write_atomic(tmp_path / "dir", "x")


def test_a_nul_in_a_list_of_paths_is_refused_with_its_line(tmp_path):
    listing = tmp_path / "changed.txt"
    listing.write_bytes(b"vllm/a.py\n\nvllm/\x00b.py\n")
    with pytest.raises(InputError) as err:
        read_lines(listing, what="--changed-files")
    line = err.value.one_line()
    assert line.startswith(f"{listing}:3: a NUL character in a path (from --changed-files)") and "\0" not in line
