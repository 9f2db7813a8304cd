"""The one way rocmci opens input files and writes output files.

Reading: only regular files are read (a directory, FIFO, device or socket is refused before a
single byte is read, so a FIFO cannot hang a run and /dev/zero cannot fill memory), symlinks are
followed but a loop is refused, and at most `limit` bytes are read: the size is what read()
returns, never what stat() claims. Every error is one line naming the path and, when the caller
says, the flag or setting it came from.

Writing: readers see the old file or the new one, never half of either. `write_atomic` writes a
temporary file beside the target and renames it over the target; the temporary file is removed
on every exit that Python sees (errors, Ctrl-C, SIGTERM once `errors.raise_on_sigterm` is
installed, as tasks.py does); only SIGKILL can leave a `.<name>.*.tmp` behind. An existing
target keeps its permission bits; a new one gets 0666 minus the umask. A symlink is written
through: its target file is replaced and the link stays. Ownership is not carried over (only root
could), and the target must not be one of the inputs of the same command.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path

from rocmci.errors import InputError, UsageError

MAX_INPUT_BYTES = 16 * 2**20  # far above any step file, inventory or JUnit report rocmci reads

# Files read so far by this process, by identity (device, inode, change time): write_atomic refuses to
# replace one of them, so `--out` naming an input (directly, through a symlink or a hard link) cannot
# destroy it even where the caller did not list its inputs. The change time keeps a reused inode number
# of a deleted file from matching; a file rocmci replaced has a new inode and is writable again.
_READ: dict[tuple[int, int, int], str] = {}

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
_OPEN_ERRORS = {
    errno.ENOENT: "no such file",
    errno.ELOOP: "is a symlink loop",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a part of the path is not a folder",
    errno.ENAMETOOLONG: "the path is too long",
    errno.ENXIO: "is a socket or a device without a reader, not a regular file",
    errno.EISDIR: "is a directory, not a regular file",
}


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _error(message: str, display: str, what: str | None, hint: str | None = None) -> InputError:
    origin = f" (from {what})" if what else ""
    return InputError(f"{message}{origin}", where=display, hint=hint)


def _fspath(path: str | os.PathLike, display: str, what: str | None) -> str:
    text = os.fspath(path)
    if "\0" in text:
        raise _error("the path contains a NUL character", repr(text)[1:-1], what)
    try:
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise _error("the path is not valid text", display.encode("utf-8", "replace").decode(), what) from None
    if not text:
        raise _error("the path is empty", "''", what, hint="give a file name")
    return text


def read_bytes(
    path: str | os.PathLike, *, what: str | None = None, limit: int = MAX_INPUT_BYTES, display: str | None = None
) -> bytes:
    """All bytes of a regular file, at most `limit` of them; InputError (exit 2) otherwise."""
    name = display or os.fspath(path)
    text = _fspath(path, name, what)
    try:
        fd = os.open(text, _OPEN_FLAGS)  # O_NONBLOCK: opening a FIFO must not wait for a writer
    except OSError as exc:
        message = _OPEN_ERRORS.get(exc.errno or 0, f"cannot read: {exc.strerror}")
        raise _error(message, name, what) from None
    try:
        info = os.fstat(fd)
        mode = info.st_mode
        if not stat.S_ISREG(mode):
            raise _error(f"is {_kind(mode)}, not a regular file", name, what, hint="give a regular file")
        _READ[(info.st_dev, info.st_ino, info.st_ctime_ns)] = f"{what} {name}" if what else name
        chunks = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            except OSError as exc:
                raise _error(f"cannot read: {exc.strerror}", name, what) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise _error(f"is larger than the limit of {limit} bytes", name, what)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(
    path: str | os.PathLike, *, what: str | None = None, limit: int = MAX_INPUT_BYTES, display: str | None = None
) -> str:
    """A regular file as UTF-8 text (see read_bytes)."""
    name = display or os.fspath(path)
    raw = read_bytes(path, what=what, limit=limit, display=name)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(f"not UTF-8 (byte {exc.start})", name, what, hint="save the file as UTF-8") from None


def read_lines(path: str | os.PathLike, *, what: str | None = None) -> tuple[str, ...]:
    """Non-blank, non-comment lines of a text file (a list of changed files); a NUL is refused.

    No path holds a NUL (git and the kernel end a path there), so one is a corrupt or binary list,
    and printing it would put a NUL on the terminal: one line with file:line instead.
    """
    text = read_text(path, what=what)
    nul = text.find("\0")
    if nul >= 0:
        where = f"{os.fspath(path)}:{text.count(chr(10), 0, nul) + 1}"
        raise _error("a NUL character in a path", where, what, hint="give one path per line, as git diff --name-only")
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))


_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
_LONG_DIGITS = re.compile(r"[0-9_]{4300,}")  # where tomllib's int() met Python's digit limit


def parse_toml(text: str, display: str) -> dict:
    """TOML as tomllib reads it, with its two unbounded corners made one-line InputErrors (exit 2).

    tomllib converts integers with int(), so 5,000 digits raise a bare ValueError (Python's int-string
    limit), and it parses arrays and inline tables recursively, so 5,000 nested arrays raise
    RecursionError. Neither is a TOMLDecodeError; both are named here with the file (and line when known).
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _TOML_POSITION.search(message)
        where = f"{display}:{at.group(1)}:{at.group(2)}" if at else display
        raise InputError(f"invalid TOML: {_TOML_POSITION.sub('', message).strip()[:200]}", where=where) from None
    except ValueError:  # only int()'s digit limit gets here: every other problem is a TOMLDecodeError
        long = _LONG_DIGITS.search(text)
        what, where = "an integer of thousands of digits", display
        if long:
            start = long.start()
            what = f"a {len(long.group())}-digit integer"
            where = f"{display}:{text.count(chr(10), 0, start) + 1}:{start - text.rfind(chr(10), 0, start)}"
        raise InputError(f"{what} is too large", where=where, hint="use a number of at most 18 digits") from None
    except RecursionError:
        raise InputError("arrays or tables nested too deeply to read", where=display, hint="flatten it") from None


def _umask() -> int:
    """The process umask, read without changing it (os.umask would, briefly, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Kernel file systems: a "folder" there is the kernel's view of a process or device, never a place for files
# (mkdir fails with ENOENT or EPERM, and a file that exists there is a kernel setting, not an output).
_KERNEL_FS = ("/proc", "/sys")
_PROBE_BYTES = b"rocmci\n"  # written and removed: a folder that cannot take these bytes cannot take a log


def prepare_folder(path: str | os.PathLike, what: str) -> Path:
    """Make the output folder `path` (and its parents) and prove a file can be written there.

    Every way it cannot be is one InputError naming `what` (the flag or setting that chose the folder):
    a file in its place, a path under /proc or /sys, no permission or a read-only mount, a full disk or
    a file size limit. Checked once before a run starts, so no run ends in an OSError from its log file.
    """
    name = os.fspath(path)
    text = _fspath(path, name, what)
    real = os.path.realpath(text)
    kernel = next((k for k in _KERNEL_FS if real == k or real.startswith(k + "/")), None)
    if kernel is not None:
        raise _error(f"is under {kernel}, a kernel file system, not a folder for files", name, what)
    try:
        os.makedirs(text, exist_ok=True)
    except FileExistsError:  # a file, or a dangling symlink, where the folder should be
        raise _error("is a file, not a folder", name, what, hint="remove it or name another folder") from None
    except OSError as exc:
        raise _error(f"cannot make the folder: {exc.strerror}", name, what) from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".rocmci-probe.", suffix=".tmp", dir=text)
    except OSError as exc:
        raise _error(f"cannot write: {exc.strerror}", name, what) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(_PROBE_BYTES)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise _error(f"cannot write: {exc.strerror}", name, what) from None
    finally:
        Path(probe).unlink(missing_ok=True)
    return Path(text)


def write_target(path: str | os.PathLike, what: str = "--out") -> Path:
    """The file a write to `path` replaces: symlinks followed; loops and non-regular files refused."""
    text = _fspath(path, os.fspath(path), what)
    name = text
    if os.path.islink(text):
        try:
            os.stat(text)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _error("is a symlink loop", name, what) from None
            # A dangling link: the file it names is created.
        text = os.path.realpath(text)
    try:
        mode = os.stat(text).st_mode
    except FileNotFoundError:
        return Path(text)
    except OSError as exc:
        raise _error(_OPEN_ERRORS.get(exc.errno or 0, f"cannot write: {exc.strerror}"), name, what) from None
    if not stat.S_ISREG(mode):
        hint = "leave --out out to write to stdout" if what == "--out" else "give a file path"
        raise _error(f"is {_kind(mode)}, not a regular file", name, what, hint=hint)
    return Path(text)


def refuse_inputs(target: Path, inputs: Mapping[str, str | os.PathLike | None], what: str = "--out") -> None:
    """UsageError when the output file is one of the inputs (same file, also through links)."""
    try:
        out = os.stat(target)
    except OSError:
        return  # a file that does not exist yet is nobody's input
    read_as = _READ.get((out.st_dev, out.st_ino, out.st_ctime_ns))
    if read_as is not None:
        raise UsageError(
            f"{what} {target} is a file this command read as input ({read_as}); writing would destroy it",
            hint=f"give {what} another path",
        )
    for origin, candidate in inputs.items():
        if candidate is None:
            continue
        try:
            other = os.stat(candidate)
        except (OSError, ValueError):
            continue
        if (out.st_dev, out.st_ino) == (other.st_dev, other.st_ino):
            raise UsageError(
                f"{what} {target} is the same file as {origin} {candidate}; writing would destroy the input",
                hint=f"give {what} another path",
            )


def write_atomic(
    path: str | os.PathLike,
    text: str | bytes,
    *,
    inputs: Mapping[str, str | os.PathLike | None] | None = None,
    what: str = "--out",
) -> Path:
    """Replace the file at `path` (or its symlink's target) with `text`; returns the file written.

    `inputs` maps the flag or setting of each input to its path: writing over any of them is refused.
    """
    target = write_target(path, what)
    refuse_inputs(target, inputs or {}, what)
    folder = target.parent  # never empty: Path("out.yaml").parent is Path(".")
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = 0o666 & ~_umask()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise _error(f"cannot write: {exc.strerror}", os.fspath(path), what) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(text.encode("utf-8") if isinstance(text, str) else text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise _error(f"cannot write: {exc.strerror}", os.fspath(path), what) from None
    except BaseException:  # includes KeyboardInterrupt and errors.Terminated (SIGTERM)
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def display_name(path: Path, workspace: Path) -> str:
    """A path as messages show it: relative to the workspace when inside it, else as given."""
    try:
        return str(Path(os.path.realpath(path)).relative_to(workspace))
    except ValueError:
        return str(path)


def remove_output(path: str, what: str) -> bool:
    """Remove the output file `path` names (a link's target), if there is one, so an earlier run's output cannot
    pass for this run's; never an input of this run. True when a file was removed."""
    target = write_target(path, what)  # a folder, FIFO or link loop: refused, as a write would be
    if not target.exists():
        return False
    refuse_inputs(target, {}, what)
    try:
        target.unlink()
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot remove an earlier run's output: {exc.strerror}",
                         hint="remove it, or give another path") from None  # fmt: skip
    return True
