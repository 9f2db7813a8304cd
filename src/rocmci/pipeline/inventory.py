"""The agent pool inventory (.buildkite/agents.yaml): queue, arch, GPUs per agent, agents online."""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from rocmci import yamldoc
from rocmci.arch import parse_arch_list
from rocmci.errors import InputError, UsageError

POOL_KEYS = {"queue", "arch", "gpus", "agents", "note"}


class Pool(NamedTuple):
    name: str
    queue: str
    arch: str | None  # None for CPU-only pools
    gpus: int
    agents: bool
    note: str = ""


class Inventory:
    """The agent pools vLLM's AMD CI has, by queue name."""

    __slots__ = ("filename", "pools", "_queues")

    def __init__(self, filename: str, pools: dict[str, Pool]) -> None:
        self.filename = filename
        self.pools = pools
        self._queues = {p.queue: p for p in pools.values()}

    def by_queue(self, queue: str) -> Pool | None:
        return self._queues.get(queue)


def from_document(doc: yamldoc.Document) -> Inventory:
    doc.refuse_duplicates()
    data = doc.data
    if not isinstance(data, dict) or not isinstance(data.get("pools"), dict):
        raise InputError("an inventory is a mapping with a 'pools' mapping", where=doc.where(()))
    pools: dict[str, Pool] = {}
    queues: dict[str, str] = {}  # queue -> the pool that claimed it first
    for name, spec in data["pools"].items():
        path = ("pools", name)
        where = doc.where(path)
        _check_name(doc, path, name)
        if not isinstance(spec, dict):
            raise InputError(f"pool '{name}' must be a mapping", where=where)
        unknown = set(spec) - POOL_KEYS
        if unknown:
            raise InputError(
                f"pool '{name}' has unknown key '{sorted(map(str, unknown))[0]}'",
                where=doc.where((*path, sorted(unknown, key=str)[0])),
                hint=f"known keys: {', '.join(sorted(POOL_KEYS))}",
            )
        queue, arch, gpus, agents = spec.get("queue"), spec.get("arch"), spec.get("gpus"), spec.get("agents")
        if not isinstance(queue, str) or not queue:
            raise InputError(f"pool '{name}' needs a 'queue' string", where=where)
        if queue in queues:
            # by_queue() maps a queue back to one pool: a second one would silently decide its arch and GPUs.
            first = doc.pos(("pools", queues[queue])).line
            raise InputError(
                f"pools '{queues[queue]}' (line {first}) and '{name}' share the queue '{queue}'",
                where=doc.where((*path, "queue")),
                hint="give each pool its own queue, or keep one of the two pools",
            )
        queues[queue] = name
        if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 0:
            raise InputError(f"pool '{name}': 'gpus' must be a whole number >= 0", where=doc.where((*path, "gpus")))
        if not isinstance(agents, bool):
            raise InputError(f"pool '{name}': 'agents' must be true or false", where=doc.where((*path, "agents")))
        if arch is not None:
            try:
                (arch,) = parse_arch_list(str(arch), what=f"pool '{name}' arch")
            except (UsageError, ValueError) as exc:
                raise InputError(
                    f"pool '{name}': arch must be one gfx target", where=doc.where((*path, "arch"))
                ) from exc
        if gpus and arch is None:
            raise InputError(f"pool '{name}' has GPUs but no 'arch'", where=where)
        pools[str(name)] = Pool(str(name), queue, arch, gpus, agents, str(spec.get("note", "")))
    return Inventory(doc.filename, pools)


# What the generator makes of a pool name: the queue amd_<pool> and a part of step keys and labels.
_POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_STR_TAG = "tag:yaml.org,2002:str"


def _check_name(doc: yamldoc.Document, path: tuple, name: str) -> None:
    """Pool names are text as written: `1:`, `true:` or `~:` is a number, boolean or null in YAML, not a name."""
    node = doc.positions.get(path)
    if node is not None and node.tag != _STR_TAG:
        raise InputError(
            f"pool name {name!r} is not text in YAML (it reads as a number, boolean or null)",
            where=doc.where(path),
            hint=f"quote it ('{name}') if that is the pool's name",
        )
    if not _POOL_NAME.fullmatch(name):
        raise InputError(
            f"pool name {name[:60]!r} is not a valid pool name",
            where=doc.where(path),
            hint="use letters, digits, '_', '.' and '-', starting with a letter or digit",
        )


def load_inventory(path: Path, display: str | None = None, *, what: str | None = None) -> Inventory:
    return from_document(yamldoc.load(path, display, what=what))
