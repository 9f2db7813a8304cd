"""Writing output files so that readers see the old version or the new one, never half of either."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from rocmci.errors import InputError


def write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror}", where=str(path)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_lines(path: Path) -> tuple[str, ...]:
    """Non-blank, non-comment lines of a text file (a list of changed files)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", where=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", where=str(path)) from None
    return tuple(line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
