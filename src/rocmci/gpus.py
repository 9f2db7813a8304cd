"""Host GPUs as the amdgpu kernel driver reports them in KFD sysfs; no ROCm tools needed."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rocmci.errors import InputError, UsageError
from rocmci.files import read_text

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
KFD_DEVICE = Path("/dev/kfd")
MAX_PROPERTIES_BYTES = 64 * 1024  # a node's properties file is about 1 KiB
MAX_NODES = 4096  # KFD numbers nodes from 0; no host has more than a few dozen
_ABSENT = (errno.ENOENT, errno.ENOTDIR)  # no KFD here: a CPU host, or a fake tree without one


@dataclass(frozen=True)
class Gpu:
    index: int  # position among GPU nodes, the number HIP and ROCR use
    node: int  # KFD topology node id
    arch: str
    render_minor: int | None

    @property
    def render_node(self) -> str | None:
        return None if self.render_minor is None else f"/dev/dri/renderD{self.render_minor}"


def gfx_name(target_version: int) -> str:
    """90402 -> gfx942: decimal major, then minor and stepping as single hex digits."""
    major = (target_version // 10000) % 100
    minor = (target_version // 100) % 100
    step = target_version % 100
    return f"gfx{major}{minor:x}{step:x}"


def parse_properties(text: str) -> dict[str, int]:
    props: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and len(parts[1]) <= 20:  # sysfs numbers are 64-bit at most
            try:
                props[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return props


def check_root(root: str | os.PathLike, what: str = "--host-root") -> Path:
    """The folder /sys and /dev are read below; UsageError (exit 2, one line) for text no folder can have."""
    text = os.fspath(root)
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise UsageError(f"{what} {text[:60]!r} is not valid text for a path") from None
    if "\0" in text:
        raise UsageError(f"{what} {text[:60]!r} contains a NUL character")
    try:
        found = os.stat(text)
    except OSError as exc:
        if exc.errno != errno.ENOENT:  # a missing root reads as a host without GPUs
            raise UsageError(f"{what} {text[:60]!r}: {exc.strerror}", hint="give a folder") from None
    else:
        # Said here, naming the flag: below a file, every path the host checks read would fail on its own.
        if not stat.S_ISDIR(found.st_mode):
            raise UsageError(f"{what} {text[:60]!r} is not a folder", hint="give a folder")
    return Path(text)


def detect_gpus(nodes_dir: Path = KFD_NODES, what: str = "KFD sysfs") -> list[Gpu]:
    """GPU nodes in KFD order; CPU nodes (gfx_target_version 0) are skipped.

    Every properties file is read through files.read_text: a FIFO or folder in a (fake) tree is refused
    with one line instead of hanging, and no more than MAX_PROPERTIES_BYTES are read.
    """
    check_root(nodes_dir, what)
    try:
        names = os.listdir(nodes_dir)
    except OSError as exc:
        if exc.errno in _ABSENT:
            return []
        raise InputError(f"cannot list the KFD topology nodes: {exc.strerror}", where=str(nodes_dir)) from None
    found: list[tuple[int, dict[str, int]]] = []
    for name in names:
        if not (name.isascii() and name.isdigit() and len(name) <= 6):
            continue
        props_file = os.path.join(nodes_dir, name, "properties")
        if not os.path.lexists(props_file):
            continue  # a node without properties (removed while listing, or an incomplete fake tree)
        props = parse_properties(read_text(props_file, what=what, limit=MAX_PROPERTIES_BYTES))
        if props.get("gfx_target_version", 0):
            found.append((int(name), props))
        if len(found) > MAX_NODES:
            raise InputError(f"more than {MAX_NODES} GPU nodes", where=str(nodes_dir))
    found.sort(key=lambda item: item[0])
    return [
        Gpu(index=i, node=node, arch=gfx_name(props["gfx_target_version"]), render_minor=props.get("drm_render_minor"))
        for i, (node, props) in enumerate(found)
    ]


def with_render_nodes(gpus: list[Gpu], root: Path = Path("/")) -> list[Gpu]:
    """The GPUs this process can open, numbered as the ROCm runtime numbers them.

    KFD sysfs is not namespaced: in a Kubernetes pod it lists every GPU of the node, while only the
    pod's own render nodes exist under /dev/dri. The runtime skips GPUs whose render node it cannot
    open and numbers the rest from 0, so the indices are renumbered the same way.
    """
    usable = [g for g in gpus if g.render_node is not None and (root / g.render_node.lstrip("/")).exists()]
    return [Gpu(i, g.node, g.arch, g.render_minor) for i, g in enumerate(usable)]
