"""The whole command surface under hostile text: every task x every text flag, and every setting.

In-process (a subprocess per example would cost the budget many times over), in a scratch
workspace, with a per-call alarm. Properties: no traceback (only invoke's Exit or a clean return),
an exit code from the task's own documented set (README "Exit codes", errors.py; exit 1 only where a
task reports findings or a failed workload), any failure said in exactly one `rocmci:` line, the last
on stderr, and for exit 2 that line naming what the case fed (the flag, its setting or ROCMCI_*
variable, or the path), bounded time, and no file written anywhere but --out.
Effectful tasks always get --dry-run; boolean flags are left to invoke's own parser.
"""

from __future__ import annotations

import inspect
import io
import os
import re
import shutil
import signal
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import tasks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from invoke import Context, Exit

from rocmci import settings as settingsmod
from rocmci import values as valuesmod
from rocmci.cli import flags as flagsmod
from rocmci.report import safe
from tests.conftest import REPO

# errors.py: 0 ok, 1 findings, 2 usage/input, 3 engine, 4 build, 5 preflight; README "Exit codes" for the rest.
WORKLOAD_CODES = {10, 11, 12, 13, 14}  # README "Exit codes": no tests (strict), teardown crash, crash, timeout, infra
RUN_CODES = {0, 1, 2, 3, 5} | WORKLOAD_CODES  # failed tests (1), engine (3), preflight (5), outcomes
# The documented codes per task (README's command table and "Exit codes"). Exit 1 belongs only to tasks that
# report findings or a workload's failure; workarounds exits 1 only with --strict, which this test never sets.
TASK_CODES = {
    "settings": {0, 2},
    "doctor": {0, 2, 3, 5},
    "workarounds": {0, 2, 3},
    "pipeline.validate": {0, 1, 2},
    "pipeline.generate": {0, 1, 2},
    "pipeline.plan": {0, 2},
    "pipeline.diff": {0, 1, 2},
    "image.check": {0, 1, 2},
    "image.build": {0, 2, 3, 4, 5},
    "image.retarget": {0, 2, 3, 4, 5},
    "image.inspect": {0, 2, 3},
    "run.dp-example": RUN_CODES,
    "run.moe-tests": RUN_CODES,
    "run.step": RUN_CODES,
    "run.bisect": RUN_CODES | {1},  # 1: skipped commits hide which one is the first bad
    "run.outcome": {0, 1, 2} | WORKLOAD_CODES,
}
# A report is the answer of these codes: the findings or the outcome are printed, and the task returns the code
# (pipeline.validate, .diff, image.check, run.outcome) without a `rocmci:` line, as README's examples show.
REPORT_CODES = {1} | WORKLOAD_CODES
# What a task needs before it reads the other flags, so that their values are checked at all: outside a vLLM
# checkout image.build and image.check stop at "no vLLM checkout", and image.retarget at "needs --from" (a dry run
# does not look the --from image up). The fed flag overrides these; the stand-in checkout is only read.
STANDIN = str(REPO / "tests" / "data" / "vllm-standin")
CONTEXT = {
    "image.build": {"vllm_src": STANDIN},
    "image.check": {"vllm_src": STANDIN},
    "image.retarget": {"vllm_src": STANDIN, "from_": "rocm/vllm-dev:base", "arch": "gfx950"},
}
# A flag value that gets a task past the flag itself, for the "was the flag to blame?" baseline (see _named).
BENIGN = {"from_": "rocm/vllm-dev:base", "step": "one"}
# run.step answers an unknown --step as "no step 'X' in FILE": the value is quoted after the flag's own noun, which
# names the flag as well as "--step" would (runs/steps.py, with did-you-mean suggestions).
NOUN = {("run.step", "step"): "no step "}
# Likewise workarounds' unknown --image: "no image X on this engine" (runs/service.py).
NOUN[("workarounds", "image")] = "no image "
PER_CALL_SECONDS = 20
# Every line rocmci prints is bounded, whatever the input: fields are cut (report.MAX_FIELD), values in errors
# are quoted at most 60 characters (values.shown). Tables and findings add their own words around those; a
# dry run's exact command may also hold the flag's own text (see check()).
MAX_LINE = 4096
DOCUMENT_TASKS = {"pipeline.generate"}
SOURCE = """\
steps:
- label: one
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  commands: [pytest -v tests/a.py]
  source_file_dependencies: [vllm/]
"""
JUNIT = '<testsuite tests="1"><testcase classname="t" name="a"/></testsuite>\n'
HOSTILE = [
    "",
    " ",
    "-",
    "--privileged",
    "--upload-pack=touch /tmp/pwned",
    "$(touch pwned)",
    "`id`",
    "a;b",
    "x\ny",
    "\0",
    "9" * 5000,
    "-99999",
    "inf",
    "2.9",
    "/dev/zero",
    "{fifo}",
    "{dir}",
    "{loop}",
    "../../../../etc/passwd",
    "ö/ü",
    "\ud800",
    "Bearer abcdefghijklmnopqrstuvwxyz012345",
    # issue 22: numbers int() or str.isdigit() read differently from ASCII digits, and regex-hostile runs
    "²",
    "١٠",
    "1_0",
    "a." * 5000 + " ://",
    "x" + "$AAAA" * 25 + "!",
]


def _tasks():
    out = []

    def walk(col, prefix=""):
        for name, t in sorted(col.tasks.items()):
            out.append((prefix + name, t))
        for name, sub in sorted(col.collections.items()):
            walk(sub, prefix + name + ".")

    walk(tasks.ns)
    return out


def _text_flags(task) -> list[str]:
    params = list(inspect.signature(task.body).parameters.values())[1:]
    return [p.name for p in params if p.default is None or isinstance(p.default, str) or p.default is p.empty]


TASKS = [(name, t) for name, t in _tasks() if name != "version"]
SURFACE = [(name, flag) for name, t in TASKS for flag in _text_flags(t)]
BY_NAME = dict(TASKS)

# Known gaps, each in an area another change owns; strict xfails, so a fix shows up as XPASS. None left:
# path flags are checked when parsed (values.path_text), image references by values.image_ref.
KNOWN: dict[tuple[str, str], str] = {}


class Hung(BaseException):
    pass


def _alarm(signum, frame):
    raise Hung()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    ws = tmp_path_factory.mktemp("surface")
    (ws / "pyproject.toml").write_text("[tool.rocmci]\n")
    (ws / ".buildkite").mkdir()
    (ws / ".buildkite" / "test-amd.yaml").write_text(SOURCE)
    shutil.copy(REPO / ".buildkite" / "agents.yaml", ws / ".buildkite" / "agents.yaml")
    shutil.copy(REPO / "src" / "rocmci" / "data" / "workarounds.yaml", ws / "workarounds.yaml")
    (ws / "junit.xml").write_text(JUNIT)
    odd = ws / "odd"
    odd.mkdir()
    os.mkfifo(odd / "fifo")
    (odd / "dir").mkdir()
    (odd / "loop").symlink_to(odd / "loop")
    old_cwd = os.getcwd()
    os.chdir(ws)
    yield ws
    os.chdir(old_cwd)


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            try:
                st_ = os.lstat(path)
            except OSError:
                continue
            found[os.path.relpath(path, root)] = (st_.st_size, st_.st_mtime_ns)
    return found


def _fill(value: str, ws: Path) -> str:
    for key in ("fifo", "dir", "loop"):
        value = value.replace("{" + key + "}", str(ws / "odd" / key))
    return value


def invoke_task(name: str, flag: str, value, ws: Path, env: dict[str, str] | None = None):
    """Run one task body as invoke would; returns (exit code, stdout, stderr, seconds)."""
    task = BY_NAME[name]
    params = inspect.signature(task.body).parameters
    kwargs = {}
    if "dry_run" in params:
        kwargs["dry_run"] = True  # never build or start anything
    if "junit" in params:
        kwargs.update(junit=str(ws / "junit.xml"), exit_code="0")
    if "template" in params:
        kwargs["template"] = str(ws / ".buildkite" / "test-amd.yaml")
    kwargs.update(CONTEXT.get(name, {}))
    if flag in task.iterable:
        kwargs[flag] = [] if value is None else [value]
    else:
        kwargs[flag] = value
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_CALL_SECONDS)
    start = time.monotonic()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                task.body(Context(), **kwargs)
                code = 0
            except Exit as exc:
                code = exc.code
                err.write(f"{exc.message or ''}\n")
    except Hung:
        pytest.fail(f"{name} --{flag} {value[:60]!r}: no answer within {PER_CALL_SECONDS} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue(), err.getvalue(), time.monotonic() - start


_BASELINE: dict[tuple[str, str], str] = {}


def _baseline(name: str, flag: str, ws: Path) -> str:
    """The task's last stderr line with `flag` given a harmless value (or none), no extra environment."""
    if (name, flag) not in _BASELINE:
        _, _, stderr, _ = invoke_task(name, flag, BENIGN.get(flag), ws)
        _BASELINE[name, flag] = (stderr.splitlines() or [""])[-1]
    return _BASELINE[name, flag]


def _flag_texts(name: str) -> set[str]:
    return {flagsmod.flag_text(p) for p in list(inspect.signature(BY_NAME[name].body).parameters)[1:]}


def _fed_names(name, flag, value, env, fed) -> list[str]:
    """What the case fed, as a message may name it: --flag, its setting and ROCMCI_ variable, a path, a variable."""
    names = list(fed)
    if value is not None:
        names.append(flagsmod.flag_text(flag))
        setting = flagsmod.FLAGS[flag].setting
        if setting:
            names += [setting, settingsmod.BY_NAME[setting].env_var]
        if flagsmod.FLAGS[flag].parse is valuesmod.path_text and isinstance(value, str) and value.strip():
            names.append(value)
            try:
                names.append(os.path.realpath(value))
            except (ValueError, UnicodeError):
                pass  # a NUL or a lone surrogate: no path; the line must name the flag
        if (name, flag) in NOUN:
            names.append(NOUN[name, flag])
    for var in env or {}:
        names.append(var)
        names += [s.name for s in settingsmod.REGISTRY if s.env_var == var]
    return names


def _named(name, flag, value, env, fed, last, ws) -> bool:
    """Exit 2's line names what the case fed, or is the very line the task gives without it (a missing
    required flag or checkout that the fed value did not cause, e.g. image.build outside a vLLM checkout)."""
    if any(n and n in last for n in _fed_names(name, flag, value, env, fed)):
        return True
    # A variable that is a path setting (ROCMCI_WORKAROUNDS=0) may be answered as the file reader answers a path:
    # "rocmci: PATH: no such file" names the path fed, in the project's file-first form.
    # The path is shown as given or as settings.path resolves it (~ expanded, made absolute).
    for text in (env or {}).values():
        try:
            resolved = os.path.realpath(ws / os.path.expanduser(text))
        except (ValueError, UnicodeError):
            resolved = None
        shown = [safe(p, limit=4000) for p in (text, resolved) if p]  # as the edge escapes a message
        if text and any(last.startswith(f"rocmci: {p}:") for p in shown):
            return True
    return last == _baseline(name, flag, ws)


def check(name, flag, value, ws, env=None, fed=()):
    before = _snapshot(ws)
    code, stdout, stderr, seconds = invoke_task(name, flag, value, ws, env)
    output = stdout + stderr
    where = f"{name} --{flag} {str(value)[:60]!r} env={env}"
    assert "Traceback" not in output, f"{where}: {output[-1500:]}"
    assert code in TASK_CODES[name], f"{where}: exit {code}, not one of {sorted(TASK_CODES[name])}: {output[-500:]}"
    lines = stderr.splitlines()
    said = [line for line in lines if line.startswith("rocmci:")]
    if code != 0 and not (code in REPORT_CODES and not said):
        assert lines and lines[-1].startswith("rocmci: "), f"{where}: exit {code}, stderr ends {stderr[-300:]!r}"
        assert len(said) == 1, f"{where}: {len(said)} rocmci: lines: {said}"
    elif code != 0:  # a report's code: the report itself is the answer, so something was said
        assert (stdout + stderr).strip(), f"{where}: exit {code} with nothing said"
    else:
        assert not said, f"{where}: exit 0 but {said}"
    if said:
        # A setting's origin names the flag that gave it ("arch (flag --arch)"): that flag must be one this task has.
        origins = set(re.findall(r"\bflag (--[a-z][a-z0-9-]*)", said[-1]))
        assert origins <= _flag_texts(name), f"{where}: names {sorted(origins - _flag_texts(name))}: {said[-1][:300]}"
    if code == 2:
        assert _named(name, flag, value, env, fed, lines[-1], ws), (
            f"{where}: exit 2 without naming {_fed_names(name, flag, value, env, fed)}: {lines[-1][:300]!r}"
        )
    # pipeline.generate's stdout is the pipeline itself: a 1 MB command in the step file is a 1 MB command there.
    shown = stderr if name in DOCUMENT_TASKS else output
    # A dry run echoes the exact command, the flag's own text included once: that much more is allowed.
    limit = MAX_LINE + (len(value) if isinstance(value, str) else 0)
    longest = max((len(line) for line in shown.splitlines()), default=0)
    assert longest <= limit, f"{where}: a {longest}-character line: {output[:300]!r}"
    after = _snapshot(ws)
    changed = {p for p in after if before.get(p) != after[p]} | (set(before) - set(after))
    allowed = {os.path.relpath(os.path.realpath(value), ws)} if flag in ("out", "annotation") else set()
    assert changed <= allowed, f"{where}: wrote {sorted(changed - allowed)}"
    return code, output


def test_the_surface_is_discovered():
    assert len(TASKS) >= 10 and len(SURFACE) >= 40, SURFACE
    assert ("pipeline.generate", "out") in SURFACE and ("run.outcome", "exit_code") in SURFACE


def _param(name, flag):
    marks = [pytest.mark.xfail(reason=KNOWN[name, flag], strict=True)] if (name, flag) in KNOWN else []
    return pytest.param(name, flag, marks=marks, id=f"{name}--{flag}")


@pytest.mark.parametrize(("name", "flag"), [_param(n, f) for n, f in SURFACE])
def test_every_flag_takes_hostile_text(name, flag, workspace):
    values = HOSTILE if flag not in ("out", "annotation") else ["{dir}", "{fifo}", "{loop}", "/dev/null", "new.yaml"]
    for value in values:
        check(name, flag, _fill(value, workspace), workspace)
    for leftover in ("pwned", "/tmp/pwned"):
        assert not Path(leftover).exists(), f"{name} --{flag}: an injected command ran"


# derandomize: every run draws the same examples (issue 24: a randomised property test once failed on unchanged code).
DRAWS = settings(
    max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.sampled_from(HOSTILE)


@DRAWS
@given(st.sampled_from([s for s in SURFACE if s[1] not in ("out", "annotation") and s not in KNOWN]), TEXT)
def test_random_text_in_any_flag(workspace, surface, value):
    name, flag = surface
    check(name, flag, _fill(value, workspace), workspace)


ENV_TASKS = ["settings", "pipeline.validate", "pipeline.plan", "workarounds", "run.moe-tests"]


@DRAWS
@given(
    st.sampled_from(
        [s.env_var for s in settingsmod.REGISTRY]
        + ["ROCMCI_Arch", "rocmci_source", "ROCMCI_NOPE", "VLLM_CI_EXPECTED_GPU_COUNT", "COLUMNS"]
    ),
    TEXT.filter(lambda v: "\0" not in v),  # the environment itself cannot hold NUL
    st.sampled_from(ENV_TASKS),
)
def test_random_text_in_any_setting(workspace, var, value, name):
    value = _fill(value, workspace)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return  # not representable in an environment
    task = BY_NAME[name]
    flag = _text_flags(task)[0] if _text_flags(task) else None
    if flag is None:
        check_env_only(name, workspace, {var: value})
    else:
        check(name, flag, None, workspace, {var: value})


def check_env_only(name, ws, env, fed=()):
    task = BY_NAME[name]
    params = list(inspect.signature(task.body).parameters)
    return check(name, params[1], inspect.signature(task.body).parameters[params[1]].default, ws, env, fed)


# --- issue 22: whole classes of hostile files, each through every task that reads that kind of file ---------
# Each entry failed before (a traceback, a hang or a NUL/megabyte line in the output) and is one case of a class
# the corpus (tests/data/bad/cases.yaml) covers by subprocess; here they meet every task in-process.

STEP = "steps:\n- label: {label}\n  agent_pool: mi300_1\n  mirror_hardwares: [amdproduction]\n{extra}"
HOSTILE_FILES = {
    # a number past int()'s 4,300-digit limit, in command text and in the env the rules read
    "tp-5000-digits": STEP.format(label="a", extra="  commands: [python x.py -tp " + "9" * 5000 + "]\n"),
    "gpus-superscript": STEP.format(
        label="a", extra="  no_plugin: true\n  commands: [pytest]\n  env: {VLLM_CI_EXPECTED_GPU_COUNT: '²'}\n"
    ),
    # a regex that restarted at every letter of 'a.a.a': a command of 10^6 characters
    "url-scheme-run": STEP.format(label="a", extra="  commands: ['" + "a." * 500_000 + " ://x']\n"),
    # a megabyte label: finding lines must stay short
    "megabyte-label": STEP.format(label="x" * 1_000_000, extra="  commands: [pytest]\n  bogus_key: 1\n"),
}
SOURCE_TASKS = ["pipeline.validate", "pipeline.plan", "pipeline.generate"]


@pytest.mark.parametrize("kind", sorted(HOSTILE_FILES))
@pytest.mark.parametrize("name", SOURCE_TASKS)
def test_hostile_step_files_through_every_task_that_reads_one(name, kind, workspace, tmp_path):
    path = tmp_path / f"{kind}.yaml"
    path.write_text(HOSTILE_FILES[kind])
    check(name, "source", str(path), workspace)


HOSTILE_PYPROJECTS = {
    "timeout-5000-digits": "[tool.rocmci]\nrun_timeout = " + "9" * 5000 + "\n",
    "5000-nested-arrays": "[tool.rocmci]\nrun_timeout = " + "[" * 5000 + "]" * 5000 + "\n",
    "3000-nested-tables": "[tool.rocmci]\nx = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_PYPROJECTS))
@pytest.mark.parametrize("name", ["settings", "pipeline.plan", "workarounds", "image.check"])
def test_hostile_pyproject_through_tasks_that_read_settings(name, kind, workspace):
    pyproject = workspace / "pyproject.toml"
    pyproject.write_text(HOSTILE_PYPROJECTS[kind])
    try:
        task = BY_NAME[name]
        flags = _text_flags(task)
        fed = ("pyproject.toml",)
        code, _ = check(name, flags[0], None, workspace, fed=fed) if flags else check_env_only(name, workspace, {}, fed)
    finally:
        pyproject.write_text("[tool.rocmci]\n")
    assert code == 2


def test_a_nul_in_the_changed_files_never_reaches_the_output(workspace, tmp_path):
    listing = tmp_path / "changed.txt"
    listing.write_bytes(b"vllm/a.py\nvllm/\x00b.py\n")
    for name in ("pipeline.plan", "pipeline.generate"):
        code, output = check(name, "changed_files", str(listing), workspace)
        assert code == 2 and "\0" not in output, name


def test_a_hostile_ci_image_is_answered(workspace):
    for name in ("pipeline.plan", "pipeline.generate"):
        code, _ = check(name, "source", None, workspace, {"ROCMCI_CI_IMAGE": "x" + "$AAAA" * 25 + "!"})
        assert code == 2, name


# Every setting's variable with an empty value, a non-ASCII digit and a shell-ish pair, through every task that reads
# settings, and through run.moe-tests, whose default image tag reads arch and vllm_arch: enumerated, not drawn, so
# each (variable, task) meets the exit-2 naming rule every run. Found an empty ROCMCI_WORKAROUNDS answered as
# "'.': is a directory" (settings.path) and a bad ROCMCI_VLLM_ARCH as "arch list '²' ..." (image/service.py).
BAD_SETTING_VALUES = ["", "²", "x;y"]


@pytest.mark.parametrize("name", [*ENV_TASKS, "image.inspect"])
def test_every_setting_with_a_bad_value_is_named(name, workspace):
    task = BY_NAME[name]
    for var in [s.env_var for s in settingsmod.REGISTRY]:
        for value in BAD_SETTING_VALUES:
            if _text_flags(task):
                check(name, _text_flags(task)[0], None, workspace, {var: value})
            else:
                check_env_only(name, workspace, {var: value})
