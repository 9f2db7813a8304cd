"""One small function per rule that has broken, or would break, vLLM's AMD CI.

Each takes the pipeline and the context and yields findings; none of them raises on odd input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, NamedTuple

from rocmci import arch as archmod
from rocmci.errors import UsageError
from rocmci.findings import ERROR, WARNING, Finding
from rocmci.pipeline.inventory import Inventory, Pool
from rocmci.pipeline.model import Pipeline, StepRef, written_commands
from rocmci.secrets import is_secret, secret_kind
from rocmci.values import parse_int

MAX_STEPS = 500  # Buildkite rejects an upload with more
MAX_TIMEOUT = 180
KEY_PATTERN = re.compile(r"[a-zA-Z0-9_\-:${}]+")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# $NAME or ${...} that `buildkite-agent pipeline upload` would replace; $$ and \$ escape it.
INTERPOLATION = re.compile(r"(?<![$\\])(?:\$\$)*\$(\{[^}]*\}?|[A-Za-z_][A-Za-z0-9_]*)")
# Known at upload time, so interpolating them is intended (e.g. an image tag with the commit).
UPLOAD_TIME_VARS = frozenset(
    {
        "BUILDKITE_BRANCH",
        "BUILDKITE_BUILD_ID",
        "BUILDKITE_BUILD_NUMBER",
        "BUILDKITE_BUILD_URL",
        "BUILDKITE_COMMIT",
        "BUILDKITE_MESSAGE",
        "BUILDKITE_ORGANIZATION_SLUG",
        "BUILDKITE_PIPELINE_SLUG",
        "BUILDKITE_PULL_REQUEST",
        "BUILDKITE_PULL_REQUEST_BASE_BRANCH",
        "BUILDKITE_REPO",
        "BUILDKITE_SOURCE",
        "BUILDKITE_TAG",
        "BUILDKITE_BUILD_CREATOR",
        "BUILDKITE_BUILD_CREATOR_EMAIL",
    }
)
DEEPEP_MARKERS = ("deepep_high_throughput", "deepep_low_latency", "test_deepep_moe", "deep_ep")
# ASCII digits only, read by values.parse_int: 5,000 digits are a finding, not int()'s ValueError.
_TP = re.compile(r"(?:^|\s)(-tp|--tensor-parallel-size)(?:=|\s+)([0-9]+)")
_DP = re.compile(r"(?:^|\s)(-dp|--data-parallel-size)(?:=|\s+)([0-9]+)")


class Context(NamedTuple):
    inventory: Inventory
    archs: tuple[str, ...]  # what the image's DeepEP is built for
    inventory_what: str = ""  # the setting the inventory came from, or "the packaged inventory"


def inventory_text(ctx: Context) -> str:
    """The inventory as the user can change it: a setting, never a path inside site-packages."""
    if ctx.inventory_what == "the packaged inventory":
        return "the inventory packaged with rocmci (setting 'inventory': this checkout has no .buildkite/agents.yaml)"
    return f"the inventory {ctx.inventory.filename}" + (f", {ctx.inventory_what}" if ctx.inventory_what else "")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def queue_of(step: StepRef, pipeline: Pipeline) -> str | None:
    agents = step.data.get("agents") if isinstance(step.data, dict) else None
    if agents is None:
        agents = pipeline.default_agents
    if isinstance(agents, dict):
        queue = agents.get("queue")
        return queue if isinstance(queue, str) else None
    if isinstance(agents, list):
        for item in agents:
            if isinstance(item, str) and item.startswith("queue="):
                return item.partition("=")[2]
    return None


def _pool(step: StepRef, pipeline: Pipeline, ctx: Context) -> Pool | None:
    queue = queue_of(step, pipeline)
    return ctx.inventory.by_queue(queue) if queue else None


def _agents_path(step: StepRef) -> tuple:
    return (*step.path, "agents") if "agents" in step.data else step.path


def empty_step(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    for step in p.steps:
        if step.data is None or step.data == {}:
            yield p.report(
                step.path, "empty-step", ERROR, "empty step: Buildkite accepts it but it does nothing; remove it"
            )


def step_limit(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    if len(p.steps) > MAX_STEPS:
        yield p.report(
            ("steps",),
            "step-limit",
            ERROR,
            f"{len(p.steps)} steps; Buildkite rejects an upload of more than {MAX_STEPS}: "
            "split it into several uploads",
        )


def unique_keys(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    seen: dict[str, StepRef] = {}
    for step in p.steps:
        key = step.key
        if key is None:
            continue
        if key in seen:
            first = p.report(seen[key].path, "unique-key", ERROR, "")
            yield p.report(
                (*step.path, "key"),
                "unique-key",
                ERROR,
                f"step key {_short(key)!r} is used again (first at line {first.line}); keys must be unique",
            )
        else:
            seen[key] = step


def key_pattern(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    for step in p.steps:
        key = step.key
        if key is None:
            continue
        if not KEY_PATTERN.fullmatch(key) or len(key) > 100 or UUID.fullmatch(key):
            bad = sorted({c for c in key if not KEY_PATTERN.fullmatch(c)})
            why = f"it contains {' '.join(repr(c) for c in bad)}" if bad else "it is too long or looks like a UUID"
            yield p.report(
                (*step.path, "key"),
                "key-pattern",
                ERROR,
                f"step key {_short(key)!r} is not a valid Buildkite key: {why}; use letters, digits, '-', '_' and ':' "
                "(join arch lists with '-')",
            )


def depends_on_resolves(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    keys = [s.key for s in p.steps if s.key]
    known = set(keys)
    for step in p.steps:
        for path, dep in step.depends_on():
            if dep not in known:
                import difflib  # only when a name is unknown: its import is a cost on every start
                close = difflib.get_close_matches(dep, keys, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                yield p.report(path, "depends-on", ERROR, f"depends_on {dep!r} names no step in this pipeline{hint}")


def dependency_cycles(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    by_key = {s.key: s for s in p.steps if s.key}
    edges = {s.key: [d for _, d in s.depends_on() if d in by_key] for s in p.steps if s.key}
    state: dict[str, int] = {}  # 1 visiting, 2 done
    reported: set[frozenset[str]] = set()
    for start in edges:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        trail: list[str] = []
        while stack:
            node, i = stack.pop()
            if i == 0:
                state[node] = 1
                trail.append(node)
            deps = edges[node]
            if i < len(deps):
                stack.append((node, i + 1))
                nxt = deps[i]
                if state.get(nxt) == 1:
                    cycle = trail[trail.index(nxt) :] + [nxt]
                    if frozenset(cycle) not in reported:
                        reported.add(frozenset(cycle))
                        yield p.report(
                            (*by_key[nxt].path, "depends_on"),
                            "dependency-cycle",
                            ERROR,
                            "dependency cycle: " + " -> ".join(cycle) + "; these steps would never start",
                        )
                elif not state.get(nxt):
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                trail.pop()


_WELL_FORMED_POOL = re.compile(r"mi[1-9]\d{2}[A-Za-z]?(?:_(\d+))?(?:_[a-z0-9]+)?")


def _pool_distance(a: str, b: str) -> int:
    from rocmci.pipeline.source import _distance

    return _distance(a, b, 1)


def near_pools(name: str, known: list[str]) -> list[str]:
    """The known pools that `name` is a slip of, best first; [] when it reads as a new pool.

    A slip: another case (MI300_2), one character added, dropped, changed or swapped (mi30_2, m300_2),
    or a GPU count that no pool has because it is not a power of two (mi300_3). A well-formed name with
    a power-of-two GPU count (mi400_8, mi300_16, mi355_dpx, or a variant of a model: mi300X_1) may be a new
    pool, so it is not a slip.
    """
    if name in known:
        return []
    lowered = [k for k in known if k.lower() == name.lower()]
    if lowered:
        return lowered
    shape = _WELL_FORMED_POOL.fullmatch(name)
    gpus = shape.group(1) if shape else None
    if shape and (gpus is None or (len(gpus) < 4 and int(gpus) & (int(gpus) - 1) == 0 and int(gpus) > 0)):
        return []
    close = [k for k in known if _pool_distance(name, k) <= 1]

    def nearness(k: str) -> tuple:
        theirs = _WELL_FORMED_POOL.fullmatch(k)
        if gpus and theirs and theirs.group(1) and len(gpus) < 4:
            return (abs(int(theirs.group(1)) - int(gpus)), k)
        return (0, k)

    return sorted(close, key=nearness)


def known_queue(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    """A queue a step has slipped on (amd_mi30_2) is an error: no agent serves it, so the step is never
    scheduled. One far from every known pool may be a new pool: a warning. No queue at all is an error."""
    inventory = ctx.inventory
    names = sorted(inventory.pools)
    for step in p.steps:
        if step.kind != "command":
            continue
        queue = queue_of(step, p)
        if queue is None:
            yield p.report(
                step.path,
                "unknown-queue",
                ERROR,
                "no agents queue: the step would fall through to the default queue; set agents: {queue: ...}",
            )
            continue
        if inventory.by_queue(queue) is not None:
            continue
        # A generated step's queue is amd_<agent_pool>: judge the pool name the user wrote.
        pool = queue[4:] if queue.startswith("amd_") else queue
        if not pool:
            yield p.report(
                _agents_path(step),
                "unknown-queue",
                ERROR,
                f"queue {queue!r} names no pool (a step without agent_pool): no agent serves it, the step would "
                "never be scheduled",
            )
            continue
        slips = near_pools(pool, names)
        if slips:
            shown = " or ".join(slips[:2])
            yield p.report(
                _agents_path(step),
                "unknown-queue",
                ERROR,
                f"pool {_short(pool)!r} (queue {_short(queue)!r}) is not in {inventory_text(ctx)}; "
                f"did you mean {shown}? No agent serves that queue: the step would never be scheduled",
            )
            continue
        yield p.report(
            _agents_path(step),
            "unknown-queue",
            WARNING,
            f"queue {_short(queue)!r} is not in {inventory_text(ctx)}: a new pool? "
            "add it there (agents: false if it is drained), or the step waits for an agent that may not exist",
        )


def pool_has_agents(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    for step in p.steps:
        if step.kind != "command":
            continue
        pool = _pool(step, p, ctx)
        if pool is None or pool.agents:
            continue
        optional = step.behind_block or bool(step.data.get("soft_fail"))
        alternatives = [
            q.name for q in ctx.inventory.pools.values() if q.agents and q.arch == pool.arch and q.gpus >= pool.gpus
        ]
        hint = f"; pools with agents for {pool.arch}: {', '.join(alternatives)}" if alternatives else ""
        yield p.report(
            _agents_path(step),
            "pool-no-agents",
            WARNING if optional else ERROR,
            f"pool {pool.name} (queue {pool.queue}) has no agents now: the step would wait forever{hint}",
        )


def _size(match: re.Match | None) -> int:
    return parse_int(match.group(2), match.group(1)) if match else 1


def parallel_size(text: str) -> int:
    """GPUs the largest `-tp N -dp M` command asks for; 0 when no command names either.

    UsageError (one line naming the flag) for a number longer than any GPU count.
    """
    if "-tp" not in text and "-dp" not in text and "-parallel-size" not in text:
        return 0  # most commands: a substring test is far cheaper than the two searches
    best = 0
    for part in text.split("&&"):
        tp = _TP.search(part)
        dp = _DP.search(part)
        if tp or dp:
            best = max(best, _size(tp) * _size(dp))
    return best


def gpu_count(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    for step in p.steps:
        if step.kind != "command":
            continue
        env = step.data.get("env") if isinstance(step.data.get("env"), dict) else {}
        raw = env.get("VLLM_CI_EXPECTED_GPU_COUNT")
        expected = None
        if raw is not None and not (isinstance(raw, str) and ("$" in raw or not raw.strip())):
            try:
                expected = parse_int(raw, "VLLM_CI_EXPECTED_GPU_COUNT", low=0)
            except UsageError as exc:  # '²', 'two', 5,000 digits: run-amd-test.sh cannot use it either
                yield p.report((*step.path, "env", "VLLM_CI_EXPECTED_GPU_COUNT"), "gpu-count", ERROR, exc.message)
        pool = _pool(step, p, ctx)
        if pool is not None and expected is not None and expected > pool.gpus:
            yield p.report(
                (*step.path, "env", "VLLM_CI_EXPECTED_GPU_COUNT"),
                "gpu-count",
                ERROR,
                f"needs {expected} GPUs but an agent of {pool.name} has {pool.gpus}; use a pool with more GPUs",
            )
        available = expected if expected is not None else (pool.gpus if pool else None)
        if available is None:
            continue
        for path, text in p.commands(step):
            try:
                size = parallel_size(text)
            except UsageError as exc:
                yield p.report(path, "gpu-count", ERROR, exc.message)
                continue
            if size > available:
                yield p.report(
                    path,
                    "gpu-count",
                    ERROR,
                    f"-tp x -dp needs {size} GPUs but the step gets {available}; raise num_gpus or lower -tp/-dp",
                )


def deepep_arch(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    built = archmod.canonical(ctx.archs)
    for step in p.steps:
        if step.kind != "command":
            continue
        uses = [path for path, text in p.commands(step) if any(m in text for m in DEEPEP_MARKERS)]
        if not uses:
            continue
        pool = _pool(step, p, ctx)
        if pool is None:
            continue  # unknown-queue says why
        if pool.arch not in ctx.archs:
            where = pool.arch or "no GPU"
            yield p.report(
                uses[0],
                "deepep-arch",
                ERROR,
                f"runs DeepEP on {pool.name} ({where}) but the image's DeepEP is built for {built}; "
                f"move the step to a {' or '.join(ctx.archs)} pool"
                + (" or add the arch to DEEPEP_ROCM_ARCH" if pool.arch in archmod.DEEPEP_ARCHS
                   else f" (DeepEP on ROCm cannot be built for {pool.arch})" if pool.arch
                   else f" ({pool.name} has no GPU)"),
            )


def _strings(value: Any, path: tuple) -> Iterator[tuple[tuple, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, (*path, i))


def _dollar_texts(value: Any, out: set[str], seen: set[int] | None = None) -> set[str]:
    """Every distinct string in `value` that holds a '$': a generated pipeline repeats a few of them
    in every step, and walking the values is cheaper than dumping the document to search it. Shared
    parts (see _texts_outside_env) are walked once."""
    seen = set() if seen is None else seen
    if isinstance(value, str):
        if "$" in value:
            out.add(value)
    elif isinstance(value, (dict, list)):
        if id(value) in seen:
            return out
        seen.add(id(value))
        for v in value.values() if isinstance(value, dict) else value:
            if isinstance(v, str):
                if "$" in v:
                    out.add(v)
            else:
                _dollar_texts(v, out, seen)
    return out


def _undefined(text: str, defined: set[str]) -> tuple[str, str] | None:
    """(token, name) of the first $NAME or ${NAME...} in `text` that upload would replace and nobody
    defines; ${NAME:-default} and ${NAME-default} name NAME."""
    for match in INTERPOLATION.finditer(text):
        name = match.group(1).strip("{}").split(":")[0].split("-")[0]
        if name not in defined:
            return "$" + match.group(1), name
    return None


def interpolation(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    defined = {str(k) for k in p.env} | UPLOAD_TIME_VARS
    if not any(_undefined(text, defined) for text in _dollar_texts(p.data, set())):
        return  # the usual case, answered from the few distinct strings
    for step in p.steps:
        data = step.data
        if step.kind == "group" and isinstance(data, dict):
            data = {k: v for k, v in data.items() if k != "steps"}  # its members are steps of their own
        # What the step runs is judged command by command, at each command's own line (for a generated
        # step, the step file's list item rather than the joined VLLM_TEST_COMMANDS).
        run = {path for path, _ in written_commands(step)}
        texts = [(path, text) for path, text in _strings(data, step.path) if path not in run]
        for path, text in [*p.commands(step), *texts]:
            found = _undefined(text, defined) if "$" in text else None
            if found is None:
                continue
            token, name = found
            yield p.report(
                path,
                "interpolation",
                ERROR,
                f"{token} is replaced by `buildkite-agent pipeline upload` before the job runs; "
                f"write ${token} to pass it to the job, or define {name} in the pipeline's env",
            )  # one finding per string is enough to point at it


def _secret_message(name: Any, value: str | int) -> str | None:
    """Why `name: value` in an env is a secret written in plain text, or None."""
    from rocmci.secrets import secret_kind

    text = str(value)
    if is_secret(str(name)) and text and not text.startswith("$"):
        return (
            f"{name} is written into the pipeline in plain text; remove it and give it to the agents "
            "as a secret or through their environment"
        )
    # A long command (VLLM_TEST_COMMANDS) is searched for credential shapes only.
    kind = secret_kind(text, whole=" " not in text.strip()) if isinstance(value, str) else None
    if kind:
        return (
            f"the value of {name} looks like {kind} and is written into the pipeline in plain text; "
            "remove it and give it to the agents as a secret, or refer to a variable ($NAME)"
        )
    return None


def secrets_in_plain_text(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    """A secret written into the pipeline is readable by everyone who can see the build.

    Found by name (HF_TOKEN: ...) and by value (a bearer token, hf_..., ghp_..., AKIA..., a private
    key, a long random string), so a credential under an innocent name is caught too. The message
    never repeats the value.
    """
    yield from _secrets_outside_env(p)
    places = [(("env",), p.env)] + [((*s.path, "env"), s.data.get("env")) for s in p.steps if isinstance(s.data, dict)]
    envs = [(base, env) for base, env in places if isinstance(env, dict)]
    # A generated pipeline repeats the same few hundred pairs in every step: judge each pair once.
    pairs = {(name, value) for _, env in envs for name, value in env.items() if isinstance(value, (str, int))}
    flagged = {pair: message for pair in pairs if (message := _secret_message(*pair))}
    if not flagged:
        return
    for base, env in envs:
        for name, value in env.items():
            message = flagged.get((name, value)) if isinstance(value, (str, int)) else None
            if message:
                yield p.report((*base, name), "secret-in-pipeline", ERROR, message)


def _texts_outside_env(value: Any, out: set[str], seen: set[int]) -> set[str]:
    """Every distinct string of a step but its env (judged by name and value above), keys included.

    `seen`: the ids of the lists and mappings already walked. A generated pipeline shares the parts every
    step repeats (the pod patch, the retry rules) and a group holds its members: each is walked once."""
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, (dict, list)):
        if id(value) in seen:
            return out
        seen.add(id(value))
        if isinstance(value, dict):
            for k, v in value.items():
                if k != "env":
                    out.add(str(k))
                    if not isinstance(v, str):
                        _texts_outside_env(v, out, seen)
                    else:
                        out.add(v)
        else:
            for v in value:
                if isinstance(v, str):
                    out.add(v)
                else:
                    _texts_outside_env(v, out, seen)
    return out


def _secret_shape(text: str) -> str | None:
    return secret_kind(text, whole=" " not in text.strip() and "$" not in text)


def _secrets_outside_env(p: Pipeline) -> Iterator[Finding]:
    """A token in a label, an agent tag or a command is published with the pipeline just as an env value is."""
    steps = [s for s in p.steps if isinstance(s.data, dict)]
    texts: set[str] = set()
    seen: set[int] = set()
    for s in steps:
        _texts_outside_env(s.data, texts, seen)
    found = {t for t in texts if _secret_shape(t)}
    if not found:
        return  # the usual case, answered from the distinct strings
    for step in steps:
        for path, text in _strings({k: v for k, v in step.data.items() if k not in ("env", "steps")}, step.path):
            key = path[-1]
            culprit = text if text in found else (key if isinstance(key, str) and key in found else None)
            if culprit is not None:
                yield p.report(
                    path,
                    "secret-in-pipeline",
                    ERROR,
                    f"{'this value' if culprit == text else 'this name'} looks like {_secret_shape(culprit)} and is "
                    "written into the pipeline in plain text; remove it and give it to the agents as a secret",
                )


def timeouts(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    """Every command step needs a timeout; the 180-minute cap holds GPU agents only, as in the template.

    The template caps test steps at 180 minutes itself and gives its own CPU build step 540 (refreshing
    the ROCm base image): a long timeout on a CPU queue is its choice, not a mistake.
    """
    for step in p.steps:
        if step.kind != "command":
            continue
        value = step.data.get("timeout_in_minutes")
        if value is None:
            yield p.report(
                step.path,
                "timeout",
                ERROR,
                f"no timeout_in_minutes: a hung GPU job would hold its agent; set one (at most {MAX_TIMEOUT})",
            )
            continue
        pool = _pool(step, p, ctx)
        if isinstance(value, int) and value > MAX_TIMEOUT and (pool is None or pool.gpus > 0):
            yield p.report(
                (*step.path, "timeout_in_minutes"),
                "timeout",
                ERROR,
                f"timeout_in_minutes {value} is over the {MAX_TIMEOUT}-minute cap of AMD CI's GPU agents",
            )


def argument_size(p: Pipeline, ctx: Context) -> Iterator[Finding]:
    """A command or env value of a step past Linux's limit on one execve argument (MAX_ARG_STRLEN, 128 KiB): the
    agent passes the commands to `bash -c` as one argument and each env entry as one NAME=value string, so
    the job would fail with "Argument list too long" (run.step refuses it before it starts, for the same reason)."""
    from rocmci.process import MAX_ARG_BYTES

    for step in p.steps:
        if step.kind != "command":
            continue
        for where in ("command", "commands", "env"):
            for path, text in _strings(step.data.get(where), (*step.path, where)):
                name = f"{path[-1]}=" if where == "env" else ""
                what = f"env {path[-1]}" if where == "env" else where
                size = len((name + text).encode("utf-8", "surrogateescape")) + 1
                if size > MAX_ARG_BYTES:
                    yield p.report(
                        path,
                        "argument-size",
                        ERROR,
                        f"{what} is {size:,} bytes, over Linux's {MAX_ARG_BYTES:,} bytes for one argument: the job "
                        "would fail with 'Argument list too long'; split the step or run a script",
                    )
        if isinstance(step.data.get("commands"), list):
            joined = " && ".join(c for c in step.data["commands"] if isinstance(c, str))
            size = len(joined.encode("utf-8", "surrogateescape")) + 1
            if size > MAX_ARG_BYTES:
                yield p.report(
                    (*step.path, "commands"),
                    "argument-size",
                    ERROR,
                    f"commands joined are {size:,} bytes, over Linux's {MAX_ARG_BYTES:,} bytes for one argument: the "
                    "job would fail with 'Argument list too long'; split the step or run a script",
                )


RULES = (
    empty_step,
    step_limit,
    unique_keys,
    key_pattern,
    depends_on_resolves,
    dependency_cycles,
    known_queue,
    pool_has_agents,
    gpu_count,
    deepep_arch,
    interpolation,
    secrets_in_plain_text,
    timeouts,
    argument_size,
)
RULE_IDS = (
    "yaml-syntax",
    "duplicate-key",
    "source-schema",
    "schema",
    "empty-step",
    "step-limit",
    "unique-key",
    "key-pattern",
    "depends-on",
    "dependency-cycle",
    "unknown-queue",
    "pool-no-agents",
    "gpu-count",
    "deepep-arch",
    "interpolation",
    "secret-in-pipeline",
    "timeout",
    "argument-size",
    "template-escape",
    "control-character",
    "no-step-for-mirror",
)
