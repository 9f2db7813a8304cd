"""Execute a BuildPlan on the engine: no-op when an image is current, stream progress, explain failures."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from rocmci.engine import Engine
from rocmci.errors import BuildError, EngineError
from rocmci.image import evidence
from rocmci.image.plan import INPUT_HASH_LABEL, BuildPlan, BuildStep
from rocmci.report import safe
from rocmci.secrets import Redactor

_STEP = re.compile(r"^#(\d+) (\[[^\]]+\] .*)$")
_ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")
_LOG = re.compile(r"^#(\d+) (?:\d+\.\d+ )?(.*)$")
_CACHED = re.compile(r"^#(\d+) CACHED$")
_DONE = re.compile(r"^#(\d+) DONE ")
TAIL_LINES = 20


@dataclass
class ProgressParser:
    """Follows BuildKit's plain progress: which step each '#N' line belongs to, and which failed."""

    names: dict[str, str] = field(default_factory=dict)
    logs: dict[str, deque[str]] = field(default_factory=dict)
    failed: str | None = None
    error: str | None = None
    current: str | None = None
    cached: set[str] = field(default_factory=set)
    done: set[str] = field(default_factory=set)

    def feed(self, line: str) -> None:
        if m := _STEP.match(line):
            self.names.setdefault(m.group(1), m.group(2))
            self.current = m.group(2)
            return
        if m := _CACHED.match(line):
            self.cached.add(m.group(1))
            return
        if m := _DONE.match(line):
            self.done.add(m.group(1))
            return
        if m := _ERROR.match(line):
            self.failed = self.failed or m.group(1)
            self.error = self.error or m.group(2)
            return
        if m := _LOG.match(line):
            number, text = m.groups()
            if number in self.names and not text.startswith(("sha256:", "DONE", "CACHED")):
                self.logs.setdefault(number, deque(maxlen=TAIL_LINES)).append(text)

    def counts(self) -> tuple[int, int]:
        """Dockerfile steps ('[stage i/n] ...') that ran, and that came from the cache."""
        steps = {n for n, name in self.names.items() if not name.startswith("[internal]")}
        return len(steps & (self.done - self.cached)), len(steps & self.cached)

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

    def __init__(self, live: bool, out=sys.stderr, columns: int | None = None) -> None:
        self.live = live
        self.out = out
        self.started = time.monotonic()
        self.columns = columns
        self.redact = Redactor(os.environ)  # once per build: a build prints a line per step and per layer

    def shown(self, text: str) -> str:
        """A line of the build (the checkout's RUN output, downloads) as it may reach a terminal or CI log."""
        return safe(self.redact(text), limit=None, one_line=False)

    def __call__(self, line: str, parser: ProgressParser) -> None:
        if not self.live:
            print(self.shown(line), file=self.out, flush=True)
            return
        elapsed = time.monotonic() - self.started
        # One column short of the width: a line that fills the last column wraps on most terminals, and
        # the next \r then rewrites only the wrapped half, leaving a stale line per update.
        columns = self.columns or shutil.get_terminal_size((80, 24)).columns
        text = f"[{elapsed:5.0f}s] {self.shown(parser.current or 'starting')}"
        self.out.write(f"\r\033[K{text[: max(columns - 1, 1)]}")
        self.out.flush()

    def close(self) -> None:
        if self.live:
            self.out.write("\n")


@dataclass(frozen=True)
class BuildResult:
    tag: str
    built: bool  # False when an up-to-date image was already there
    seconds: float
    ran: int = 0
    cached: int = 0
    verified: tuple[str, ...] = ()  # a retarget's DeepEP code objects, read inside it before any push


def is_current(step: BuildStep, engine: Engine) -> bool:
    labels = engine.image_labels(step.tag)
    return labels is not None and labels.get(INPUT_HASH_LABEL) == step.input_hash


def build_step(step: BuildStep, engine: Engine, *, live: bool, log: Callable[[str], None]) -> BuildResult:
    started = time.monotonic()
    if not step.force and is_current(step, engine):
        log(f"{step.tag} is up to date ({INPUT_HASH_LABEL} {step.input_hash}); nothing to build (--force rebuilds)")
        found = _verified(step, engine)  # up to date is a label: the code objects are read all the same
        if step.push:  # up to date here says nothing of the registry: a push that failed last time is retried
            push(step, engine, log, log)
        return BuildResult(step.tag, False, time.monotonic() - started, verified=found)
    parser = ProgressParser()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    progress = Progress(live)

    def on_line(line: str) -> None:
        tail.append(line)
        parser.feed(line)
        progress(line, parser)

    try:
        code = engine.stream(step.argv(engine.client), on_line, env=engine.build_env)
    finally:
        progress.close()
    if code != 0:
        try:
            engine.server_version()
        except EngineError:
            raise EngineError(
                f"the Docker engine stopped while building {step.tag}",
                hint="start it again and rerun; finished stages come from the build cache",
            ) from None
        raise parser.failure(code, tail)
    if step.output is not None:  # an OCI layout for the next tier: nothing in the store to read or check
        ran, cached = parser.counts()
        return BuildResult(step.tag, True, time.monotonic() - started, ran, cached)
    labels = engine.image_labels(step.tag) or {}
    if labels.get(INPUT_HASH_LABEL) != step.input_hash:
        raise BuildError(
            f"{step.tag} was built but lacks label {INPUT_HASH_LABEL}={step.input_hash}",
            hint="another build may have replaced the tag meanwhile; rerun",
        )
    if step.deepep_check is not None:  # before any push: nothing that fails it leaves this engine
        check_deepep(step, engine, log)
    found = _verified(step, engine)  # the same for a retarget's own verifier
    if step.push:
        push(step, engine, log, lambda line: progress(line, parser))
    ran, cached = parser.counts()
    return BuildResult(step.tag, True, time.monotonic() - started, ran, cached, verified=found)


def push(step: BuildStep, engine: Engine, log: Callable[[str], None], on_line: Callable[[str], None]) -> None:
    log(f"pushing {step.tag}")
    code = engine.stream(step.push_argv(engine.client), on_line)
    if code != 0:
        raise BuildError(f"docker push {step.tag} failed with exit {code}", hint="check registry login")


def check_deepep(step: BuildStep, engine: Engine, log: Callable[[str], None]) -> None:
    """The built image's DeepEP code objects against the requested list; on a mismatch untag it and raise."""
    check = step.deepep_check
    assert check is not None
    try:
        argv = evidence.argv(engine.client, step.tag, check)
        done = engine.cli(*argv[1:], timeout=600, check=False, input=evidence.script())
        found = evidence.judge(done.stdout, done.returncode, step.tag, check)
    except (BuildError, EngineError) as exc:
        untag = engine.cli("rmi", step.tag, check=False)
        if untag.returncode == 0:
            said = f"the image was untagged, so no label claims {check.archs}"
        else:
            why = (untag.stderr.strip().splitlines() or ["no output"])[-1]
            said = f"untagging {step.tag} failed ({why}): remove it with `docker rmi {step.tag}`"
        raise type(exc)(exc.message, hint=f"{said}; {exc.hint}" if exc.hint else said) from None
    log(f"checked {step.tag}: DeepEP code objects for {';'.join(found)}, as requested")
    record_evidence(step.tag, ";".join(found), engine)


def record_evidence(tag: str, archs: str, engine: Engine) -> None:
    """Label the image with what its code objects hold (a LABEL-only build on top: no layer, the same files),
    so run preflight reads a verified list rather than the requested one."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="rocmci-evidence-") as ctx:
        with open(f"{ctx}/Dockerfile", "w", encoding="utf-8") as fh:
            fh.write(f"FROM {tag}\nLABEL {evidence.EVIDENCE_LABEL}=\"{archs}\"\n")
        code = engine.stream([engine.client, "build", "--network", "none", "-q", "--tag", tag, ctx], lambda _: None,
                             env=engine.build_env)  # fmt: skip
    if code != 0:
        raise BuildError(f"{tag} checks out but its evidence label could not be written (docker build exit {code})",
                         hint="rerun with --force")  # fmt: skip


def _verified(step: BuildStep, engine: Engine) -> tuple[str, ...]:
    """A retarget step's result (built or reused): deep_ep imports and its code objects are the list it was built
    for, by the verifier the overlay copied in (image.retarget and image.build's retarget tier alike); () for
    another tier. A mismatch is a BuildError, raised before the image is pushed."""
    if step.target != "retarget":
        return ()
    from rocmci.image import retarget

    done = engine.cli(*retarget.verify_argv(engine.client, step)[1:], timeout=600, check=False)
    return tuple(retarget.check_verification(done.stdout, done.returncode, step.tag)["found"])


def build(plan: BuildPlan, engine: Engine, *, live: bool, log: Callable[[str], None]) -> list[BuildResult]:
    """Each step in order (ci_base or a retarget, then test): a step whose image is current is not rebuilt."""
    results = []
    for step in plan.steps:
        result = build_step(step, engine, live=live, log=log)
        if result.built:
            log(f"built {result.tag} ({step.target}) in {result.seconds:.0f}s: {result.ran} steps ran, "
                f"{result.cached} cached")
        if result.verified:  # a retarget, checked before the next tier starts FROM it
            log(f"verified {step.tag}: deep_ep imports; code objects for {';'.join(result.verified)}")
        results.append(result)
    return results
