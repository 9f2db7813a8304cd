"""Which BuildKit Dockerfile features a Dockerfile needs, and which of them the host's builder rejects.

Needs come from the file's own syntax (the flags BuildKit's parser reports per instruction, heredocs,
a `# syntax=` directive), never from a version guess. Whether the builder has them is asked of the
builder itself: a one-instruction probe per feature, built with the same client and environment as
the real build, counts as missing only when the builder's parser rejects it (Engine.parses). So a
Docker 20.10 engine, whose built-in BuildKit rejects `ADD --checksum`, is refused before the first
stage instead of failing at "dockerfile parse error" an hour into the build.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from rocmci.checkout import VllmDockerfile
from rocmci.errors import PreflightError

# Flags the classic builder already had: they need nothing from BuildKit.
CLASSIC_FLAGS = {
    ("COPY", "from"), ("COPY", "chown"), ("ADD", "chown"), ("FROM", "platform"),
    ("HEALTHCHECK", "interval"), ("HEALTHCHECK", "timeout"), ("HEALTHCHECK", "start-period"),
    ("HEALTHCHECK", "retries"),
}  # fmt: skip
# Dockerfile frontend release that made a feature stable (docs.docker.com "Dockerfile release notes"),
# named in the message so the user can tell what a builder must have.
FRONTEND = {"ADD --checksum": "1.6", "COPY --link": "1.4", "ADD --link": "1.4", "heredocs": "1.4", "RUN --mount": "1.2"}
_UNREACHABLE = "http://127.0.0.1:9/rocmci-probe"  # a fetch that fails at once, after the parser accepted it
_SYNTAX = re.compile(r"^#\s*syntax\s*=\s*(\S+)\s*$", re.I)
WHAT_TO_DO = (
    "build with a newer BuildKit: Docker >= 23 with buildx and a docker-container builder "
    "(`docker buildx create --driver docker-container --use`, as vLLM's CI hosts do; ROCMCI_DOCKER names "
    "the client), or a newer engine; a `# syntax=docker/dockerfile:1` line also works where the host can "
    "pull that frontend"
)


@dataclass(frozen=True)
class Use:
    """The first place the file uses a feature, and a minimal Dockerfile that uses only it."""

    feature: str  # e.g. "ADD --checksum"
    line: int
    probe: str | None  # None: not probed (a # syntax= frontend is fetched from a registry at build time)


def uses(df: VllmDockerfile) -> list[Use]:
    found: dict[str, Use] = {}

    def add(feature: str, line: int, probe: str | None) -> None:
        found.setdefault(feature, Use(feature, line, probe))

    for number, text in enumerate(df.lines, start=1):
        if not text.startswith("#"):
            break  # parser directives are read only at the very top
        if m := _SYNTAX.match(text):
            add(f"# syntax={m.group(1)}", number, None)
    for stage in df.stages:
        for ins in stage.instructions:
            if ins.heredocs:
                add("heredocs", ins.start, "FROM scratch\nRUN <<EOF\ntrue\nEOF\n")
            for flag in ins.flags:
                name = flag.lstrip("-").split("=", 1)[0]
                if (ins.cmd, name) in CLASSIC_FLAGS:
                    continue
                add(f"{ins.cmd} --{name}", ins.start, _probe(ins.cmd, name, flag))
    return sorted(found.values(), key=lambda u: u.line)


def _probe(cmd: str, name: str, flag: str) -> str:
    if cmd == "ADD" and name == "checksum":
        return f"FROM scratch\nADD --checksum=sha256:{'0' * 64} {_UNREACHABLE} /probe\n"
    if cmd == "RUN":
        return f"FROM scratch\nRUN {flag} true\n"
    if cmd in ("COPY", "ADD"):
        return f"FROM scratch\n{cmd} {flag} rocmci-probe-missing /probe\n"
    # HEALTHCHECK (or an instruction BuildKit may give flags later) with its flag and a command, then a
    # COPY of a missing file: the parser sees the flag, and the build still fails before any image exists.
    command = " CMD true" if cmd == "HEALTHCHECK" else ""
    return f"FROM scratch\n{cmd} {flag}{command}\nCOPY rocmci-probe-missing /probe\n"


@dataclass(frozen=True)
class Gap:
    use: Use
    why: str  # the builder's own words


def missing(found: list[Use], parses: Callable[[str], tuple[bool, str]]) -> list[Gap]:
    gaps = []
    for use in found:
        if use.probe is None:
            continue
        ok, why = parses(use.probe)
        if not ok:
            gaps.append(Gap(use, why))
    return gaps


def describe(df: VllmDockerfile, gap: Gap) -> str:
    stable = FRONTEND.get(gap.use.feature)
    since = f" (Dockerfile frontend {stable}+)" if stable else ""
    why = re.sub(r" line \d+", "", gap.why)  # the probe's line, not the file's
    return f"{df.display}:{gap.use.line} uses {gap.use.feature}{since}; this builder rejects it ({why})"


def notes(df: VllmDockerfile, found: list[Use]) -> list[str]:
    return [
        f"{df.display}:{u.line} {u.feature}: BuildKit pulls that frontend from its registry when the build starts"
        for u in found
        if u.probe is None
    ]


def refusal(df: VllmDockerfile, gaps: list[Gap], client: str) -> PreflightError:
    more = f" (and {len(gaps) - 1} more: {', '.join(g.use.feature for g in gaps[1:])})" if len(gaps) > 1 else ""
    return PreflightError(f"{client} cannot build {df.display}: {describe(df, gaps[0])}{more}", hint=WHAT_TO_DO)
