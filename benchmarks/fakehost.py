"""A fake AMD GPU host for benchmarks: KFD sysfs entries and character devices standing in for GPUs."""

from __future__ import annotations

import os
from pathlib import Path


def fake_host(root: Path, gpus: int, target_version: int = 90402) -> Path:
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    (root / "dev/dri").mkdir(parents=True)
    os.mknod(root / "dev/kfd", 0o666 | 0o020000, os.makedev(1, 3))
    for i in range(gpus + 1):
        (nodes / str(i)).mkdir(parents=True)
        version = 0 if i == 0 else target_version  # node 0 is the CPU
        lines = [f"gfx_target_version {version}"]
        if i:
            lines.append(f"drm_render_minor {127 + i}")
            os.mknod(root / f"dev/dri/renderD{127 + i}", 0o666 | 0o020000, os.makedev(1, 3))
        (nodes / str(i) / "properties").write_text("\n".join(lines) + "\n")
    return root
