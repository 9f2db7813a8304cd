"""Promises of files.py and secrets.py that mutation testing found unguarded (issue 24).

files.py: only regular files are read, within a limit; every failure is one exact line naming the path, the
flag or setting it came from and what to do; writes are atomic (a temporary file beside the target,
complete and with its final mode before the rename, gone on every exit), never replace an input, keep or
derive permission bits from the umask without changing it, and make missing folders. secrets.py: what
counts as a random-looking secret, and no part of a secret left beside its mask.

Everything here runs in this process against real files (no mock of rocmci's code); where an OS failure
is needed it is made real (no free file descriptor, a file size limit, /proc/self/mem's EIO, a temporary
file removed by someone else, a real SIGTERM), with os functions at most wrapped to observe or interfere.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rocmci import errors, files
from rocmci.errors import InputError, UsageError
from rocmci.secrets import Redactor, secret_kind

SETTING = "ROCMCI_RESULTS_DIR"


def one_line(call, *args, **kwargs) -> str:
    with pytest.raises((InputError, UsageError)) as err:
        call(*args, **kwargs)
    assert err.value.exit_code == 2
    return err.value.one_line()


@contextlib.contextmanager
def no_free_descriptor():
    """RLIMIT_NOFILE lowered to the lowest free descriptor: the next open() fails with EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest = os.open(os.devnull, os.O_RDONLY)
    os.close(lowest)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def fd_path(fd: int) -> Path:
    return Path(os.readlink(f"/proc/self/fd/{fd}"))


# --- reading ------------------------------------------------------------------------------------------------


def test_an_empty_file_reads_as_nothing(tmp_path):
    """Reading: a regular file of zero bytes is read (as b''), not refused."""
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert files.read_bytes(path) == b"" and files.read_text(path) == ""


def test_bad_path_text_is_one_exact_line_naming_the_flag():
    """Bad input: a NUL, unencodable text or an empty path is one line with the path as typed and the flag."""
    assert (
        one_line(files.read_bytes, "a\0b", what="--junit")
        == r"a\x00b: the path contains a NUL character (from --junit)"
    )
    assert one_line(files.read_bytes, "\ud800x", what="--junit") == "?x: the path is not valid text (from --junit)"
    assert one_line(files.read_bytes, "", what="--junit") == "'': the path is empty (from --junit). give a file name"
    assert one_line(files.read_bytes, "") == "'': the path is empty. give a file name"  # no flag: no "(from ...)"
    assert one_line(files.write_atomic, "a\0b", "x") == r"a\x00b: the path contains a NUL character (from --out)"
    assert one_line(files.write_atomic, "\ud800x", "x", what="--annotation") == (
        "?x: the path is not valid text (from --annotation)"
    )
    assert one_line(files.prepare_folder, "\ud800x", SETTING) == f"?x: the path is not valid text (from {SETTING})"


def test_a_file_name_that_is_not_utf8_is_read_and_written(tmp_path):
    """Linux file names are bytes: a Latin-1 name (surrogate-escaped by Python) is a valid path, not bad text."""
    name = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"caf\xe9.yaml"))
    files.write_atomic(name, "steps: []\n")
    assert files.read_bytes(name, what="--source") == b"steps: []\n"


def test_reading_errors_are_one_exact_line(tmp_path):
    """Bad input: each refusal to read is one line: path, reason, (from flag), and what to do."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    missing = tmp_path / "missing.yaml"
    big = tmp_path / "big"
    big.write_bytes(b"0123456789")
    latin = tmp_path / "latin1"
    latin.write_bytes("caf\xe9".encode("latin-1"))
    listing = tmp_path / "changed.txt"
    expected = {
        (files.read_bytes, fifo, "--source"): f"{fifo}: is a FIFO (named pipe), not a regular file (from --source). "
        "give a regular file",
        (files.read_bytes, tmp_path, None): f"{tmp_path}: is a directory, not a regular file. give a regular file",
        (files.read_text, missing, "--pipeline"): f"{missing}: no such file (from --pipeline)",
        (files.read_lines, listing, "--changed-files"): f"{listing}: no such file (from --changed-files)",
        (files.read_text, latin, "--changed-files"): f"{latin}: not UTF-8 (byte 3) (from --changed-files). "
        "save the file as UTF-8",
        # /proc/self/mem is a regular file whose offset 0 is unmapped: open() works, read() fails with EIO.
        (files.read_bytes, Path("/proc/self/mem"), "--junit"): "/proc/self/mem: cannot read: Input/output error "
        "(from --junit)",
    }
    for (call, path, what), line in expected.items():
        assert one_line(call, path, what=what) == line
    assert one_line(files.read_text, missing, what="--pipeline", display="shown.yaml") == (
        "shown.yaml: no such file (from --pipeline)"
    )
    assert one_line(files.read_text, big, what="--junit", limit=5) == (
        f"{big}: is larger than the limit of 5 bytes (from --junit)"
    )
    assert files.read_text(big, limit=10) == "0123456789"


def test_running_out_of_file_descriptors_is_one_line_and_writes_nothing(tmp_path):
    """Bad input: an open() failure outside the known causes (EMFILE) is one line with the OS's reason."""
    source = tmp_path / "steps.yaml"
    source.write_text("steps: []\n")
    folder = tmp_path / "results"
    folder.mkdir()
    out = tmp_path / "annotation.md"
    caught = []
    with no_free_descriptor():
        for call in (
            lambda: files.read_bytes(source, what="--junit"),
            lambda: files.prepare_folder(folder, SETTING),
            lambda: files.write_atomic(out, "x", what="--annotation"),
        ):
            try:
                call()
            except InputError as exc:
                caught.append(exc.one_line())
    assert caught == [
        f"{source}: cannot read: Too many open files (from --junit)",
        f"{folder}: cannot write: Too many open files (from {SETTING})",
        f"{out}: cannot write: Too many open files (from --annotation)",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results", "steps.yaml"] and not any(folder.iterdir())


def test_large_files_are_read_whole_and_at_most_one_byte_past_the_limit(tmp_path, monkeypatch):
    """Limits: a file of several read() chunks comes back whole; past the limit, limit+1 bytes are read, no more."""
    content = bytes(range(256)) * (6 * 1024 + 3)  # 1.5 MiB and a bit: two chunks
    path = tmp_path / "report.xml"
    path.write_bytes(content)
    assert files.read_bytes(path) == content
    limit = 1024 * 1024 + 100
    assert one_line(files.read_bytes, path, what="--junit", limit=limit) == (
        f"{path}: is larger than the limit of {limit} bytes (from --junit)"
    )
    huge = tmp_path / "huge.xml"
    huge.write_bytes(b"x" * (5 * 1024 * 1024 // 2))  # 2.5 MiB against a 2 MiB limit: three chunks
    assert one_line(files.read_bytes, huge, limit=2 * 1024 * 1024).endswith("is larger than the limit of 2097152 bytes")
    counted = []
    real_read = os.read

    def counting(fd, n):
        data = real_read(fd, n)
        counted.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counting)
    with pytest.raises(InputError):
        files.read_bytes(huge, limit=limit)
    assert sum(counted) == limit + 1


def test_a_nul_in_a_list_of_paths_names_the_line_of_the_first_one(tmp_path):
    """Bad input: a NUL is refused with file:line of the first NUL, also at the very start or after blank lines."""
    listing = tmp_path / "changed.txt"
    hint = "give one path per line, as git diff --name-only"
    for data, line in ((b"\x00vllm/a.py\n", 1), (b"\n\nvllm/\x00a.py\nvllm/\x00b.py\n", 3)):
        listing.write_bytes(data)
        assert one_line(files.read_lines, listing, what="--changed-files") == (
            f"{listing}:{line}: a NUL character in a path (from --changed-files). {hint}"
        )


# --- TOML -------------------------------------------------------------------------------------------------


def test_toml_errors_are_exact_lines_with_file_line_and_column():
    """Bad input: invalid TOML, huge integers and deep nesting are one line with file:line:column and a hint."""
    digits = "9" * 5000
    too_large = "a 5000-digit integer is too large. use a number of at most 18 digits"
    cases = {
        "[tool.rocmci\n": "pyproject.toml:1:13: invalid TOML: Expected ']' at the end of a table declaration",
        "x = ": "pyproject.toml: invalid TOML: Invalid value (at end of document)",  # tomllib gives no line there
        f"\n# c\n[tool.rocmci]\nrun_timeout = {digits}\n": f"pyproject.toml:4:15: {too_large}",
        f"\nx = {digits}": f"pyproject.toml:2:5: {too_large}",
        "x = " + "[" * 5000 + "]" * 5000: "pyproject.toml: arrays or tables nested too deeply to read. flatten it",
    }
    for text, line in cases.items():
        assert one_line(files.parse_toml, text, "pyproject.toml") == line
    # tomllib's message can hold a whole key: the line keeps its first 200 characters.
    key = "a" * 300
    message = f"Cannot declare {(key,)} twice"[:200]
    assert one_line(files.parse_toml, f"[{key}]\n[{key}]\n", "p.toml") == f"p.toml:2:302: invalid TOML: {message}"


def test_an_integer_over_a_lowered_python_digit_limit_is_still_one_line():
    """Bad input: PYTHONINTMAXSTRDIGITS can lower int()'s limit below 4300 digits; the error stays one line."""
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(700)
    try:
        line = one_line(files.parse_toml, "x = " + "9" * 800 + "\n", "pyproject.toml")
    finally:
        sys.set_int_max_str_digits(before)
    assert line == "pyproject.toml: an integer of thousands of digits is too large. use a number of at most 18 digits"


# --- output folders ---------------------------------------------------------------------------------------


def test_an_existing_output_folder_is_used_as_it_is(tmp_path):
    """Output folders: a folder that exists (with files in it) is fine, and its files are left alone."""
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "old.xml").write_text("<old/>")
    assert files.prepare_folder(folder, SETTING) == folder
    assert [p.name for p in folder.iterdir()] == ["old.xml"] and (folder / "old.xml").read_text() == "<old/>"


def test_refused_output_folders_are_exact_lines(tmp_path):
    """Bad input: a file in the folder's place, a path under a file or under /proc: one line, setting, hint."""
    blocker = tmp_path / "file"
    blocker.write_text("keep\n")
    assert one_line(files.prepare_folder, blocker, SETTING) == (
        f"{blocker}: is a file, not a folder (from {SETTING}). remove it or name another folder"
    )
    assert one_line(files.prepare_folder, blocker / "sub", SETTING) == (
        f"{blocker}/sub: cannot make the folder: Not a directory (from {SETTING})"
    )
    assert one_line(files.prepare_folder, "/proc/rocmci", SETTING) == (
        f"/proc/rocmci: is under /proc, a kernel file system, not a folder for files (from {SETTING})"
    )
    assert blocker.read_text() == "keep\n"


def test_the_folder_probe_is_a_hidden_file_in_that_folder_and_removed(tmp_path, monkeypatch):
    """Output folders: the bytes are written into the folder itself (`.rocmci-probe.*.tmp`) and removed."""
    folder = tmp_path / "results"
    seen = []
    real_fsync = os.fsync

    def observe(fd):
        probe = fd_path(fd)
        seen.append((probe.parent, probe.name, probe.read_bytes()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", observe)
    assert files.prepare_folder(folder, SETTING) == folder
    [(parent, name, data)] = seen
    assert parent == folder and re.fullmatch(r"\.rocmci-probe\.\w+\.tmp", name) and data == b"rocmci\n"
    assert list(folder.iterdir()) == []


def test_a_probe_removed_by_someone_else_still_proves_the_folder(tmp_path, monkeypatch):
    """Output folders: the probe was written; another process deleting it (a tmp cleaner) is no error."""
    real_fsync = os.fsync

    def removed_meanwhile(fd):
        real_fsync(fd)
        fd_path(fd).unlink()

    monkeypatch.setattr(os, "fsync", removed_meanwhile)
    assert files.prepare_folder(tmp_path / "results", SETTING) == tmp_path / "results"


def test_a_folder_that_takes_no_bytes_is_one_line_in_process(tmp_path):
    """Output folders: a write failing with EFBIG (a file size limit, like a full disk) is one line, no probe left."""
    folder = tmp_path / "full"
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))
    try:
        files.prepare_folder(folder, SETTING)
    except InputError as exc:
        line = exc.one_line()
    else:  # pragma: no cover - the assertion below reports it
        line = "no error"
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert line == f"{folder}: cannot write: File too large (from {SETTING})"
    assert list(folder.iterdir()) == []


# --- writing ---------------------------------------------------------------------------------------------


def test_the_temporary_file_is_complete_beside_the_target_before_the_rename(tmp_path, monkeypatch):
    """Atomic writes: `.<name>.*.tmp` in the target's folder (one file system: rename is atomic), holding every
    byte with the final mode when it replaces the target."""
    target = tmp_path / "out.yaml"
    target.write_text("old\n")
    target.chmod(0o640)
    renames = []
    real_replace = os.replace

    def observe(src, dst):
        renames.append((Path(src).parent, Path(src).name, Path(src).read_bytes(), stat.S_IMODE(os.stat(src).st_mode)))
        assert target.read_text() == "old\n"  # readers still see the old file
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", observe)
    files.write_atomic(target, b"new\x00\xff")  # bytes are written as they are
    [(parent, name, data, mode)] = renames
    assert parent == tmp_path and re.fullmatch(r"\.out\.yaml\.\w+\.tmp", name)
    assert data == b"new\x00\xff" and mode == 0o640
    assert target.read_bytes() == b"new\x00\xff" and [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_missing_folders_above_the_output_are_made(tmp_path):
    """Writing: `--out results/2026/x.json` makes the missing folders, as many levels as needed."""
    out = tmp_path / "a" / "b" / "c" / "out.json"
    assert files.write_atomic(out, "{}\n") == out and out.read_text() == "{}\n"


def test_a_new_file_gets_0666_minus_a_zero_umask_and_the_umask_is_kept(tmp_path):
    """Permissions: a new file's mode is 0666 & ~umask (no execute bit even with umask 0); the umask is unchanged."""
    old = os.umask(0)
    try:
        files.write_atomic(tmp_path / "new.yaml", "x")
        after = os.umask(old)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.yaml").stat().st_mode) == 0o666 and after == 0


def test_the_umask_is_read_without_ever_being_set(tmp_path):
    """Permissions: the umask is read from /proc, never set (os.umask would change it for every thread)."""
    calls = []

    def profile(frame, event, arg):
        if event == "c_call" and arg is os.umask:
            calls.append(event)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        files.write_atomic(tmp_path / "new.yaml", "x")
    finally:
        sys.setprofile(previous)
    assert calls == [] and (tmp_path / "new.yaml").read_text() == "x"


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root for a mount namespace")
def test_without_proc_the_umask_is_still_honoured_and_restored(tmp_path):
    """Permissions: where /proc/self/status cannot be read (no /proc mounted), the umask is still honoured and
    left as it was. A real mount namespace with an empty /proc, no mock."""
    code = (
        "import os, stat, sys\n"
        "from rocmci import files\n"
        "os.umask(0o027)\n"
        "files.write_atomic(sys.argv[1], 'x')\n"
        "print(oct(stat.S_IMODE(os.stat(sys.argv[1]).st_mode)), oct(os.umask(0)), os.path.exists('/proc/self'))\n"
    )
    out = tmp_path / "new.yaml"
    script = f'mount -t tmpfs none /proc && exec {sys.executable} -c "$0" "$1"'
    done = subprocess.run(
        ["unshare", "--mount", "sh", "-c", script, code, str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode and not done.stdout and "Traceback" not in done.stderr:  # unshare or mount refused
        pytest.skip(f"no mount namespace here: {done.stderr.strip()[-200:]}")
    assert done.stdout.split() == ["0o640", "0o27", "False"], done.stderr


def test_refused_targets_are_exact_lines_naming_their_flag(tmp_path):
    """Bad input: targets that cannot be written are one line with the flag that named them and a hint."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    sock_path = tmp_path / "s"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    stdout = "leave --out out to write to stdout"
    try:
        assert one_line(files.write_atomic, blocker / "out.yaml", "x", what="--annotation") == (
            f"{blocker}/out.yaml: a part of the path is not a folder (from --annotation)"
        )
        assert (
            one_line(files.write_atomic, loop, "x", what="--annotation")
            == f"{loop}: is a symlink loop (from --annotation)"
        )
        assert (
            one_line(files.write_atomic, sock_path, "x")
            == f"{sock_path}: is a socket, not a regular file (from --out). {stdout}"
        )
        # write_target's own default names --out, with --out's hint.
        assert (
            one_line(files.write_target, tmp_path)
            == f"{tmp_path}: is a directory, not a regular file (from --out). {stdout}"
        )
    finally:
        sock.close()
    block = tmp_path / "disk"
    try:
        os.mknod(block, stat.S_IFBLK | 0o600, os.makedev(7, 0))
    except OSError as exc:  # pragma: no cover - no CAP_MKNOD
        pytest.skip(f"cannot make a block device node: {exc}")
    assert (
        one_line(files.write_atomic, block, "x")
        == f"{block}: is a block device, not a regular file (from --out). {stdout}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk", "file", "loop", "s"]


def test_an_input_is_never_overwritten_and_the_refusal_names_both(tmp_path):
    """Refusing to overwrite inputs: every listed input is checked (none skipped after an unset or missing one),
    and the one line names the output's flag, the input's flag and what to do."""
    source = tmp_path / "test-amd.yaml"
    source.write_text("steps: []\n")
    inputs = {"--changed-files": None, "--inventory": tmp_path / "missing.yaml", "--source": source}
    assert one_line(files.write_atomic, source, "pipeline", inputs=inputs, what="--annotation") == (
        f"--annotation {source} is the same file as --source {source}; writing would destroy the input. "
        "give --annotation another path"
    )
    assert one_line(files.refuse_inputs, source, {"--source": source}) == (
        f"--out {source} is the same file as --source {source}; writing would destroy the input. "
        "give --out another path"
    )
    assert source.read_text() == "steps: []\n"


def test_a_file_read_without_a_flag_is_named_by_its_path_when_refused(tmp_path):
    """Refusing to overwrite inputs: a file read by path only (no flag) is named as just its path."""
    source = tmp_path / "registry.toml"
    source.write_text("x = 1\n")
    files.read_bytes(source)
    assert one_line(files.write_atomic, source, "y") == (
        f"--out {source} is a file this command read as input ({source}); writing would destroy it. "
        "give --out another path"
    )
    assert one_line(files.write_atomic, source, "y", what="--annotation").endswith("give --annotation another path")
    assert source.read_text() == "x = 1\n"


def test_a_temporary_removed_by_someone_else_is_one_line_and_the_old_file_stays(tmp_path, monkeypatch):
    """Atomic writes: if another process deletes the temporary file mid-write, the error is one line (no
    traceback) and the target keeps its old content."""
    target = tmp_path / "out.yaml"
    target.write_text("old\n")
    real_fsync = os.fsync

    def removed_meanwhile(fd):
        real_fsync(fd)
        fd_path(fd).unlink()

    monkeypatch.setattr(os, "fsync", removed_meanwhile)
    assert (
        one_line(files.write_atomic, target, "new\n")
        == f"{target}: cannot write: No such file or directory (from --out)"
    )
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_sigterm_right_after_the_rename_ends_as_terminated(tmp_path, monkeypatch):
    """Atomic writes: a SIGTERM arriving just after the rename still ends as Terminated (exit 143), with the new
    file complete and no temporary left, not as an error about the temporary file being gone."""
    target = tmp_path / "out.yaml"
    target.write_text("old\n")
    real_replace = os.replace

    def rename_then_sigterm(src, dst):
        real_replace(src, dst)
        os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    errors.raise_on_sigterm()
    monkeypatch.setattr(os, "replace", rename_then_sigterm)
    try:
        with pytest.raises(errors.Terminated) as err:
            files.write_atomic(target, "new\n")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert err.value.exit_code == 143 and err.value.__context__ is None
    assert target.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


def test_display_name_is_relative_inside_the_workspace_and_as_given_outside(tmp_path):
    """Messages: a path inside the workspace (also through a symlink) is shown relative to it, else as given."""
    workspace = tmp_path / "ws"
    (workspace / ".buildkite").mkdir(parents=True)
    step_file = workspace / ".buildkite" / "test-amd.yaml"
    step_file.write_text("steps: []\n")
    (tmp_path / "link").symlink_to(workspace / ".buildkite")
    assert files.display_name(step_file, workspace) == ".buildkite/test-amd.yaml"
    assert files.display_name(tmp_path / "link" / "test-amd.yaml", workspace) == ".buildkite/test-amd.yaml"
    assert files.display_name(Path("/etc/hostname"), workspace) == "/etc/hostname"


# --- secrets ---------------------------------------------------------------------------------------------

RANDOM = "random-looking string"


@pytest.mark.parametrize(
    ("token", "kind"),
    [
        ("Zq8vAx0Tn5Rk2Wm9Yb4Hc7Pd1Jf6GsXe", "a long random-looking string"),  # every class, high entropy
        ("ZQ8vzx0tn5rk2wm9yb4hc7pd1jf6gsXe", "a long random-looking string"),  # exactly 3 upper case
        ("zq8vAX0TN5RK2WM9YB4HC7PD1JF6GSXE", "a long random-looking string"),  # exactly 3 lower case
        ("Zq8vAxaTnbRkcWmdYbeHcfPgiJfj3s1e", "a long random-looking string"),  # exactly 3 digits
        ("ABCDEFabcdef0123ABCDEFabcdef0123", "a long random-looking string"),  # entropy exactly 4.0 bits
        ("Zq8vzx0tn5rk2wm9yb4hc7pd1jf6gsxe", None),  # 1 upper case: a lower-case id
        ("Q7X2M9K4V8B3N6Z1P5R0T2W7Y4C8H3J6", None),  # no lower case: an upper-case code
        ("k3j9x2m7q8w1e4r6t5y0uiopasdfghzl", None),  # no upper case: base36
        ("ZqavAxbTncRkdWmeYbfHcgPdhJfiGsXe", None),  # no digits
        ("ABCDEFabcdef012ABCDEFabcdef012AB", None),  # 15 symbols: entropy below 4.0
    ],
)
def test_what_counts_as_random_looking(token, kind):
    """Secrets by value: a long token is a secret when it mixes at least 3 upper case, 3 lower case and 3 digits
    with at least 4.0 bits of entropy per character; hashes and ids lacking a class stay readable."""
    assert secret_kind(token) == kind
    shown = Redactor({})(f"token {token} end")
    assert shown == (f"token {token} end" if kind is None else "token *** end")


def test_a_secret_inside_a_longer_secret_leaves_no_part_of_the_longer_one():
    """Redaction: of two secrets, one inside the other, the longer is masked first: no leftover prefix."""
    given = {"DB_PASSWORD": "zzsecret99", "DB_URL_TOKEN": "prefix-zzsecret99"}
    assert Redactor({}, given=given)("url prefix-zzsecret99 and zzsecret99") == "url *** and ***"


def test_a_plain_given_value_of_eight_characters_is_masked_inside_words():
    """Redaction: a --env value under a plain name is masked inside other words from 8 characters on."""
    redact = Redactor({}, given={"MODE": "abcdefgh", "SHORT": "pass"})
    assert redact("xabcdefghx 4 passed pass") == "x***x 4 passed ***"
