"""Host GPUs as the amdgpu kernel driver reports them in KFD sysfs; no ROCm tools needed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")
KFD_DEVICE = Path("/dev/kfd")


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
        if len(parts) == 2:
            try:
                props[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return props


def detect_gpus(nodes_dir: Path = KFD_NODES) -> list[Gpu]:
    """GPU nodes in KFD order; CPU nodes (gfx_target_version 0) are skipped."""
    if not nodes_dir.is_dir():
        return []
    found: list[tuple[int, dict[str, int]]] = []
    for entry in nodes_dir.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            props = parse_properties((entry / "properties").read_text())
        except OSError:
            continue
        if props.get("gfx_target_version", 0):
            found.append((int(entry.name), props))
    found.sort(key=lambda item: item[0])
    return [
        Gpu(index=i, node=node, arch=gfx_name(props["gfx_target_version"]), render_minor=props.get("drm_render_minor"))
        for i, (node, props) in enumerate(found)
    ]
