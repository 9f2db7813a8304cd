from __future__ import annotations

from pathlib import Path

import pytest

from rocmci import gpus


@pytest.mark.parametrize(
    ("version", "name"),
    [(90010, "gfx90a"), (90402, "gfx942"), (90500, "gfx950"), (110000, "gfx1100"), (120001, "gfx1201")],
)
def test_gfx_target_version_decoding(version, name):
    assert gpus.gfx_name(version) == name


def make_node(root: Path, node: int, version: int, render: int | None = None) -> None:
    folder = root / str(node)
    folder.mkdir(parents=True)
    lines = ["cpu_cores_count 0", f"gfx_target_version {version}", "name_is_ignored text"]
    if render is not None:
        lines.append(f"drm_render_minor {render}")
    (folder / "properties").write_text("\n".join(lines) + "\n")


def test_detect_skips_cpu_nodes_and_keeps_kfd_order(tmp_path):
    make_node(tmp_path, 0, 0)  # CPU node
    make_node(tmp_path, 2, 90500, render=129)
    make_node(tmp_path, 1, 90402, render=128)
    make_node(tmp_path, 10, 90010, render=136)
    (tmp_path / "README").write_text("not a node")
    found = gpus.detect_gpus(tmp_path)
    assert [(g.index, g.node, g.arch, g.render_node) for g in found] == [
        (0, 1, "gfx942", "/dev/dri/renderD128"),
        (1, 2, "gfx950", "/dev/dri/renderD129"),
        (2, 10, "gfx90a", "/dev/dri/renderD136"),
    ]


def test_no_kfd_means_no_gpus(tmp_path):
    assert gpus.detect_gpus(tmp_path / "absent") == []
