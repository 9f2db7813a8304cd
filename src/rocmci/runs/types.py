"""The plain data a run is made of, shared by planning (execute), printing (dryrun) and judging (outcomes).

One leaf module, so those three import it and not each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmci.gpus import Gpu
from rocmci.runs.container import ContainerSpec
from rocmci.runs.workloads import Workload

# Who chose the results folder, for errors about it (there is no flag: the setting, from pyproject or env).
RESULTS_WHAT = "setting results_dir, ROCMCI_RESULTS_DIR"


@dataclass
class RunOptions:
    image: str
    results_dir: Path
    timeout: float
    network: str | None  # the settings registry holds the defaults of these five
    shm_size: str
    memory: str | None
    hf_cache: str
    workdir: str
    host_root: Path = Path("/")
    gpus: tuple[int, ...] | None = None
    skip_preflight: bool = False
    no_container: bool = False
    dry_run: bool = False
    strict: bool = False  # fail on what vLLM's runner lets pass: obsolete workarounds, no tests collected
    env: dict[str, str] = field(default_factory=dict)  # --env overrides, secrets included
    public: frozenset[str] = frozenset()  # --public: names whose values may be shown
    image_local_only: bool = False  # the tag image.build gives (no --image, --build-id or setting): never pulled


@dataclass(frozen=True)
class PlannedRun:
    workload: Workload
    gpus: list[Gpu]
    spec: ContainerSpec | None  # None in host mode
    slot: int  # position in its wave: GPU set and rendezvous ports
    env: dict[str, str] = field(default_factory=dict)  # host mode: what rocmci sets (no secrets); printed
    # A Buildkite job (run.step): how to start it (on_line, running) -> RunResult, and the command it starts.
    start: Callable[..., Any] | None = None
    shown: tuple[str, ...] = ()


@dataclass
class Prepared:
    """Everything decided before anything starts: waves of runs that go at once."""

    waves: list[list[PlannedRun]]
    warnings: list[str]
    notes: list[str] = field(default_factory=list)  # workarounds applied or left out, and why
    files: list[Path] = field(default_factory=list)  # logs and JUnit XML this run wrote (set by execute)

    @property
    def runs(self) -> list[PlannedRun]:
        return [run for wave in self.waves for run in wave]
