"""What a build takes from the vLLM checkout: the paths its stages COPY, and a digest of their content.

The digest is the "tree" half of the input hash: a rebuild is skipped only when every file those
stages copy is byte-identical. .dockerignore is honoured for the common pattern forms
(globs, `**`, `!` exceptions); anything it cannot match is hashed, so an unknown form can cost a
rebuild but never skips a needed one.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import os
import stat
from pathlib import Path

from rocmci.files import read_text
from rocmci.image import vllm_dockerfile as vd

WHOLE_TREE = "."
IGNORE_FILE_BYTES = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
_URL = ("http://", "https://", "git@", "git://")


def sources(df: vd.VllmDockerfile, stages: list[vd.Stage], scope: dict[str, str]) -> tuple[str, ...]:
    """Context paths the stages read: COPY/ADD without --from (ONBUILD ones too), RUN --mount=type=bind."""
    found: set[str] = set()
    for stage in stages:
        for ins in stage.instructions:
            kind = ins.sub if ins.cmd == "ONBUILD" else ins.cmd
            if kind in ("COPY", "ADD") and not ins.flag("from"):
                values = ins.value if ins.cmd != "ONBUILD" else _onbuild_words(ins)
                for src in values[:-1]:
                    if not src.startswith(_URL):
                        found.add(_normalise(vd.expand(src, scope)))
            for mount in ins.mounts():
                if mount.get("type", "bind") == "bind" and "from" not in mount:
                    found.add(_normalise(mount.get("source", mount.get("src", WHOLE_TREE))))
    if any(s == WHOLE_TREE or "$" in s for s in found):
        return (WHOLE_TREE,)
    return tuple(sorted(found))


def _onbuild_words(ins: vd.Instruction) -> tuple[str, ...]:
    words = ins.value
    return tuple(w for w in words if not w.startswith("--"))


def _normalise(path: str) -> str:
    path = os.path.normpath(path.strip().lstrip("/")) if path.strip() not in ("", "/", "./") else WHOLE_TREE
    return WHOLE_TREE if path in ("", ".") else path


def _ignore_rules(root: Path) -> list[tuple[bool, str]]:
    path = root / ".dockerignore"
    if not os.path.lexists(path):
        return []
    # A FIFO, folder or loop here is refused in one line (BuildKit would fail on it too), never read blocking.
    text = read_text(path, what="the vLLM checkout's .dockerignore", limit=IGNORE_FILE_BYTES)
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip().lstrip("/"))
        rules.append((negate, pattern))
    return rules


def _ignored(rel: str, rules: list[tuple[bool, str]]) -> bool:
    result = False
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for negate, pattern in rules:
        glob_pattern = pattern.replace("**/", "*").replace("/**", "/*")
        if any(fnmatch.fnmatchcase(p, pattern) or fnmatch.fnmatchcase(p, glob_pattern) for p in prefixes):
            result = not negate
    return result


def _files(root: Path, source: str, rules: list[tuple[bool, str]]) -> list[str]:
    matches = [root] if source == WHOLE_TREE else [Path(p) for p in glob.glob(str(root / source))]
    out: list[str] = []
    for match in matches:
        if match.is_dir():
            for folder, dirs, names in os.walk(match):
                dirs.sort()
                for name in sorted(names):
                    rel = os.path.relpath(os.path.join(folder, name), root)
                    if not _ignored(rel, rules):
                        out.append(rel)
        elif match.exists():
            rel = os.path.relpath(match, root)
            if not _ignored(rel, rules):
                out.append(rel)
    return out


def digest(root: Path, paths: tuple[str, ...]) -> str:
    """sha256 over the relative path and content of every file under `paths`; missing paths count as such."""
    rules = _ignore_rules(root)
    h = hashlib.sha256()
    for source in paths:
        files = _files(root, source, rules)
        if not files:
            h.update(f"missing:{source}\0".encode())
        for rel in sorted(set(files)):
            h.update(f"{rel}\0".encode())
            _hash_content(h, root / rel)
            h.update(b"\0")
    return h.hexdigest()


def _hash_content(h, path: Path) -> None:
    """Stream a regular file into `h`; anything else counts by its kind, without a blocking open.

    Not files.read_bytes: a checkout may hold files far larger than any input rocmci parses, and
    they are hashed block by block rather than held in memory. The same rule applies, though: a FIFO
    or device is never read (O_NONBLOCK keeps even the open from waiting for a writer).
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except (OSError, ValueError):
        h.update(b"unreadable")
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            h.update(b"not-a-regular-file")
            return
        while block := os.read(fd, 1 << 20):
            h.update(block)
    except OSError:
        h.update(b"unreadable")
    finally:
        os.close(fd)
