"""Execute a BuildPlan on the engine: no-op when the image is current, stream progress, explain failures."""

from __future__ import annotations

import re
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rocmci.engine import Engine
from rocmci.errors import BuildError, EngineError
from rocmci.image.plan import BuildPlan

_STEP = re.compile(r"^#(\d+) (\[[^\]]+\] .*)$")
_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
_LOG = re.compile(r"^#(\d+) (?:\d+\.\d+ )?(.*)$")
TAIL_LINES = 20


@dataclass
class ProgressParser:
    """Follows BuildKit's plain progress: which step each '#N' line belongs to, and which failed."""

    names: dict[str, str] = field(default_factory=dict)
    logs: dict[str, deque[str]] = field(default_factory=dict)
    failed: str | None = None
    error: str | None = None
    current: str | None = None

    def feed(self, line: str) -> None:
        if m := _STEP.match(line):
            self.names.setdefault(m.group(1), m.group(2))
            self.current = m.group(2)
            return
        if m := _ERROR.match(line):
            self.failed = self.failed or m.group(1)
            self.error = self.error or m.group(2)
            return
        if m := _LOG.match(line):
            number, text = m.groups()
            if number in self.names and not text.startswith(("sha256:", "DONE", "CACHED")):
                self.logs.setdefault(number, deque(maxlen=TAIL_LINES)).append(text)

    def failure(self, returncode: int, tail: deque[str]) -> BuildError:
        if self.failed:
            step = self.names.get(self.failed, f"#{self.failed}")
            lines = list(self.logs.get(self.failed, ()))
            return BuildError(f"build failed at {step}: {self.error}", hint=_tail_hint(lines))
        return BuildError(f"docker build exited with {returncode}", hint=_tail_hint(list(tail)))


def _tail_hint(lines: list[str]) -> str:
    return "last lines: " + " | ".join(lines[-5:]) if lines else "see the build output above"


class Progress:
    """Plain lines for logs and CI; a single updating line on a terminal."""

    def __init__(self, live: bool, out=sys.stderr) -> None:
        self.live = live
        self.out = out
        self.started = time.monotonic()

    def __call__(self, line: str, parser: ProgressParser) -> None:
        if not self.live:
            print(line, file=self.out, flush=True)
            return
        elapsed = time.monotonic() - self.started
        status = (parser.current or "starting")[:100]
        self.out.write(f"\r\033[K[{elapsed:5.0f}s] {status}")
        self.out.flush()

    def close(self) -> None:
        if self.live:
            self.out.write("\n")


@dataclass(frozen=True)
class BuildResult:
    tag: str
    built: bool  # False when an up-to-date image was already there
    seconds: float


def build(plan: BuildPlan, engine: Engine, *, live: bool, log: Callable[[str], None]) -> BuildResult:
    started = time.monotonic()
    if not plan.force:
        labels = engine.image_labels(plan.tag)
        if labels is not None and labels.get("rocmci.input-hash") == plan.input_hash:
            log(f"{plan.tag} is up to date (input hash {plan.input_hash}); nothing to build (--force rebuilds)")
            return BuildResult(plan.tag, False, time.monotonic() - started)
    parser = ProgressParser()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    progress = Progress(live)

    def on_line(line: str) -> None:
        tail.append(line)
        parser.feed(line)
        progress(line, parser)

    argv = plan.argv(engine.client)
    try:
        code = engine.stream(argv, on_line, env=engine.build_env)
    finally:
        progress.close()
    if code != 0:
        try:
            engine.server_version()
        except EngineError:
            raise EngineError(
                f"the Docker engine stopped while building {plan.tag}",
                hint="start it again and rerun; finished stages come from the build cache",
            ) from None
        raise parser.failure(code, tail)
    labels = engine.image_labels(plan.tag) or {}
    if labels.get("rocmci.input-hash") != plan.input_hash:
        raise BuildError(
            f"{plan.tag} was built but lacks label rocmci.input-hash={plan.input_hash}",
            hint="the Dockerfile's final stage must set LABEL rocmci.input-hash=${ROCMCI_INPUT_HASH}",
        )
    if plan.push:
        log(f"pushing {plan.tag}")
        code = engine.stream([engine.client, "push", plan.tag], lambda line: progress(line, parser))
        if code != 0:
            raise BuildError(f"docker push {plan.tag} failed with exit {code}", hint="check registry login")
    return BuildResult(plan.tag, True, time.monotonic() - started)
