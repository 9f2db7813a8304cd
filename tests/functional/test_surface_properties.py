"""The whole command surface under hostile text: every task x every text flag, and every setting.

In-process (a subprocess per example would cost the budget many times over), in a scratch
workspace, with a per-call alarm. Properties: no traceback (only invoke's Exit or a clean return),
an exit code from the documented set, bounded time, and no file written anywhere but --out.
Effectful tasks always get --dry-run; boolean flags are left to invoke's own parser.
"""

from __future__ import annotations

import inspect
import io
import os
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
from tests.conftest import REPO

EXIT_CODES = {0, 1, 2, 3, 4, 5}  # errors.py: ok, findings, usage/input, engine, build, preflight
PER_CALL_SECONDS = 20
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
    shutil.copy(REPO / "workarounds.yaml", ws / "workarounds.yaml")
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
    """Run one task body as invoke would; returns (exit code, stdout + stderr, seconds)."""
    task = BY_NAME[name]
    params = inspect.signature(task.body).parameters
    kwargs = {}
    if "dry_run" in params:
        kwargs["dry_run"] = True  # never build or start anything
    if "junit" in params:
        kwargs.update(junit=str(ws / "junit.xml"), exit_code="0")
    if "template" in params:
        kwargs["template"] = str(ws / ".buildkite" / "test-amd.yaml")
    kwargs[flag] = [value] if flag in task.iterable else value
    out = io.StringIO()
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(PER_CALL_SECONDS)
    start = time.monotonic()
    try:
        with redirect_stdout(out), redirect_stderr(out):
            try:
                task.body(Context(), **kwargs)
                code = 0
            except Exit as exc:
                code = exc.code
                out.write(f"{exc.message or ''}\n")
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
    return code, out.getvalue(), time.monotonic() - start


def check(name, flag, value, ws, env=None):
    before = _snapshot(ws)
    code, output, seconds = invoke_task(name, flag, value, ws, env)
    where = f"{name} --{flag} {str(value)[:60]!r} env={env}"
    assert "Traceback" not in output, f"{where}: {output[-1500:]}"
    assert code in EXIT_CODES, f"{where}: exit {code}: {output[-500:]}"
    after = _snapshot(ws)
    changed = {p for p in after if before.get(p) != after[p]} | (set(before) - set(after))
    allowed = {os.path.relpath(os.path.realpath(value), ws)} if flag in ("out", "annotation") else set()
    assert changed <= allowed, f"{where}: wrote {sorted(changed - allowed)}"
    return code, seconds


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


TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40) | st.sampled_from(HOSTILE)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([s for s in SURFACE if s[1] not in ("out", "annotation") and s not in KNOWN]), TEXT)
def test_random_text_in_any_flag(workspace, surface, value):
    name, flag = surface
    check(name, flag, _fill(value, workspace), workspace)


ENV_TASKS = ["settings", "pipeline.validate", "pipeline.plan", "workarounds"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from([s.env_var for s in settingsmod.REGISTRY] + ["ROCMCI_Arch", "rocmci_source", "ROCMCI_NOPE"]),
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


def check_env_only(name, ws, env):
    task = BY_NAME[name]
    params = list(inspect.signature(task.body).parameters)
    check(name, params[1], inspect.signature(task.body).parameters[params[1]].default, ws, env)
