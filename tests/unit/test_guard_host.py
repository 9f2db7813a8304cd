"""Older promises of issue 35 still open: `--out` naming an input is refused, and GPU archs are read from KFD
sysfs (src/rocmci/gpus.py). docs/guards.md maps each test to the mutation it was watched to kill.

`rocmci pipeline.generate` runs in process through `program.main`, as the console script runs it
(tests/unit/test_mutants_cli.py's helper), on real files; the KFD trees are laid out as the amdgpu driver
lays out /sys/class/kfd/kfd/topology/nodes.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from rocmci import gpus
from tests.conftest import REPO
from tests.unit.test_gpus import make_node
from tests.unit.test_mutants_cli import _outside_any_workspace, rocmci  # noqa: F401 - fixtures

DATA = REPO / "tests" / "data" / "pipeline"
VALID = DATA / "source" / "valid" / "deepep.yaml"

# --- --out naming an input is refused ----------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """A folder holding every file pipeline.generate reads: the step file, the changed-files list, the pool
    inventory (ROCMCI_INVENTORY) and the workspace's pyproject.toml with a [tool.rocmci] table."""
    root = tmp_path / "ws"
    root.mkdir()
    shutil.copyfile(VALID, root / "steps.yaml")
    shutil.copyfile(DATA / "agents.yaml", root / "agents.yaml")
    (root / "changed.txt").write_text("vllm/distributed/parallel_state.py\n")
    (root / "pyproject.toml").write_text('[tool.rocmci]\narch = "gfx942;gfx950"\n')
    monkeypatch.setenv("ROCMCI_INVENTORY", str(root / "agents.yaml"))
    monkeypatch.chdir(root)
    return root


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in root.iterdir() if p.is_file()}


@pytest.mark.parametrize("flag", ["--out", "--annotation"])
@pytest.mark.parametrize(
    ("target", "read_as"),
    [
        ("steps.yaml", "--source"),
        ("changed.txt", "--changed-files"),
        ("agents.yaml", "setting 'inventory' (env ROCMCI_INVENTORY) agents.yaml"),
        ("pyproject.toml", "the workspace's pyproject.toml"),
        ("link.yaml", "--source"),
        ("hard.yaml", "--source"),
    ],
)
def test_an_output_naming_an_input_is_refused_and_the_input_kept(rocmci, workspace, flag, target, read_as):  # noqa: F811
    (workspace / "link.yaml").symlink_to(workspace / "steps.yaml")
    os.link(workspace / "steps.yaml", workspace / "hard.yaml")
    if flag == "--annotation":  # an annotation is written only when there are findings: give the file some
        shutil.copyfile(DATA / "source" / "invalid" / "unknown-key.yaml", workspace / "steps.yaml")
    before = _snapshot(workspace)
    extra = ["--keep-going", "--out", str(workspace / "p.yaml")] if flag == "--annotation" else []
    code, out, err = rocmci(
        "pipeline.generate", "--source", "steps.yaml", "--changed-files", "changed.txt", *extra, flag, target
    )
    assert code == 2, err
    refusal = err.splitlines()[-1]  # after the findings' report on stderr, for the file with findings
    assert refusal.startswith(f"rocmci: {flag} ") and "writing would destroy" in refusal, err
    assert f"({read_as}" in refusal and refusal.endswith(f"give {flag} another path"), refusal
    assert "Traceback" not in err
    assert _snapshot(workspace) == before  # nothing written, nothing replaced
    assert out == ""


def test_an_output_that_is_no_input_is_written(rocmci, workspace):  # noqa: F811
    code, _, err = rocmci("pipeline.generate", "--source", "steps.yaml", "--changed-files", "changed.txt",
                          "--out", "pipeline.yaml")  # fmt: skip
    assert code == 0, err
    assert "\nsteps:\n- group: AMD Tests\n" in (workspace / "pipeline.yaml").read_text()


# --- GPU archs read from KFD sysfs -------------------------------------------------------------------------------


def test_every_gpu_node_is_read_whatever_the_listing_order_of_a_node_without_properties(tmp_path):
    """A node folder without a properties file (a GPU going away while the folder is listed) is skipped; the
    nodes listed after it are still read. The folder listed first loses its file, wherever the filesystem
    puts it."""
    make_node(tmp_path, 0, 0)
    for node, version in zip(range(1, 6), (90402, 90500, 90010, 110000, 120001), strict=True):
        make_node(tmp_path, node, version, render=127 + node)
    first = os.listdir(tmp_path)[0]
    (tmp_path / first / "properties").unlink()
    archs = {1: "gfx942", 2: "gfx950", 3: "gfx90a", 4: "gfx1100", 5: "gfx1201"}
    expected = [(n, a) for n, a in archs.items() if str(n) != first]
    found = gpus.detect_gpus(tmp_path)
    assert [(g.node, g.arch) for g in found] == expected
    assert [g.index for g in found] == list(range(len(expected)))


def test_archs_come_from_gfx_target_version_only(tmp_path):
    """The arch is gfx_target_version decoded; a line with more than two words, or a number past 64 bits, is not
    a property (sysfs writes `name value`)."""
    folder = tmp_path / "1"
    folder.mkdir()
    (folder / "properties").write_text(
        "gfx_target_version 90402 extra\nname gfx1100\ngfx_target_version " + "9" * 21 + "\ndrm_render_minor 128\n"
    )
    make_node(tmp_path, 2, 90500, render=129)
    assert [(g.node, g.arch, g.render_minor) for g in gpus.detect_gpus(tmp_path)] == [(2, "gfx950", 129)]
    assert gpus.parse_properties("gfx_target_version 90402\nsimd_count 304\n") == {
        "gfx_target_version": 90402,
        "simd_count": 304,
    }


# --- KFD sysfs: what is a node, and what a bad --host-root says (survivors of the gpus mutation run) ------------


def _usage_line(fn, *args) -> str:
    from rocmci.errors import RocmciError

    with pytest.raises(RocmciError) as err:
        fn(*args)
    assert err.value.exit_code == 2
    return err.value.one_line()


def test_a_host_root_that_no_folder_can_be_is_one_line_naming_the_flag(tmp_path):
    file = tmp_path / "file"
    file.write_text("x")
    assert _usage_line(gpus.check_root, "\ud800x") == "--host-root '\\ud800x' is not valid text for a path"
    assert _usage_line(gpus.check_root, "a\0b") == "--host-root 'a\\x00b' contains a NUL character"
    assert _usage_line(gpus.check_root, str(file)) == f"--host-root '{str(file)[:60]}' is not a folder. give a folder"
    below = str(file / ("x" * 80))
    assert _usage_line(gpus.check_root, below) == f"--host-root '{below[:60]}': Not a directory. give a folder"
    assert _usage_line(gpus.detect_gpus, file) == f"KFD sysfs '{str(file)[:60]}' is not a folder. give a folder"
    assert gpus.check_root(tmp_path / "missing") == tmp_path / "missing"  # a host without GPUs


def test_a_node_is_a_folder_named_by_at_most_6_ascii_digits_with_a_gfx_target_version(tmp_path):
    make_node(tmp_path, 123456, 90402, render=128)
    make_node(tmp_path, 1234567, 90500, render=129)  # 7 digits: not a node
    (tmp_path / "\u0661").mkdir()  # an Arabic-Indic one, which int() would read as 1
    (tmp_path / "\u0661" / "properties").write_text("gfx_target_version 90010\n")
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "properties").write_text("cpu_cores_count 64\n")  # no gfx_target_version: a CPU
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "properties").write_text("gfx_target_version " + "9" * 20 + "\n")  # 20 digits: read
    found = gpus.detect_gpus(tmp_path)
    assert [(g.node, g.arch) for g in found] == [(8, gpus.gfx_name(int("9" * 20))), (123456, "gfx942")]


def test_more_than_4096_gpu_nodes_is_one_line(tmp_path):
    for node in range(4097):
        folder = tmp_path / str(node)
        folder.mkdir()
        (folder / "properties").write_text("gfx_target_version 90402\n")
    assert _usage_line(gpus.detect_gpus, tmp_path) == f"{tmp_path}: more than 4096 GPU nodes"
    (tmp_path / "4096" / "properties").write_text("gfx_target_version 0\n")
    assert len(gpus.detect_gpus(tmp_path)) == 4096


def test_renumbered_gpus_keep_their_node_and_arch(tmp_path):
    make_node(tmp_path / "nodes", 1, 90402, render=128)
    make_node(tmp_path / "nodes", 2, 90500, render=129)
    (tmp_path / "dev/dri").mkdir(parents=True)
    (tmp_path / "dev/dri/renderD129").write_text("")  # only the second GPU's render node is in this pod
    found = gpus.with_render_nodes(gpus.detect_gpus(tmp_path / "nodes"), tmp_path)
    assert found == [gpus.Gpu(index=0, node=2, arch="gfx950", render_minor=129)]


def test_a_kfd_tree_that_cannot_be_read_is_one_line_naming_where(tmp_path):
    from tests.unit.test_mutants_files import no_free_descriptor

    make_node(tmp_path, 1, 90402, render=128)
    with no_free_descriptor():  # listing a folder needs a descriptor: EMFILE, as on a host out of them
        line = _usage_line(gpus.detect_gpus, tmp_path)
    assert line == f"{tmp_path}: cannot list the KFD topology nodes: Too many open files"
    fifo = tmp_path / "2"
    fifo.mkdir()
    os.mkfifo(fifo / "properties")  # a fake tree's FIFO: refused, never waited on
    assert _usage_line(gpus.detect_gpus, tmp_path) == (
        f"{fifo / 'properties'}: is a FIFO (named pipe), not a regular file (from KFD sysfs). give a regular file"
    )
    (fifo / "properties").unlink()
    (fifo / "properties").write_text("x 1\n" * 20_000)  # 80 KB: past the 64 KiB a properties file may have
    assert "is larger than the limit of 65536 bytes" in _usage_line(gpus.detect_gpus, tmp_path)
    assert "(from --kfd)" in _usage_line(gpus.detect_gpus, tmp_path, "--kfd")


def test_a_long_host_root_is_shown_up_to_60_characters():
    long = "x" * 50 + "\0" + "y" * 50
    assert _usage_line(gpus.check_root, long) == f"--host-root {long[:60]!r} contains a NUL character"
    bad = "\ud800" + "z" * 80
    assert _usage_line(gpus.check_root, bad) == f"--host-root {bad[:60]!r} is not valid text for a path"
