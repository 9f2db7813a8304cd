"""The installed `rocmci` command: rocmci's own help and options, "did you mean", and the process edge
(Ctrl-C, stdout faults, encodings, closed pipes), each run as a user runs it, in a separate process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocmci.cli.program import INVOKE_OPTIONS
from tests.conftest import REPO

ROCMCI = [sys.executable, "-c", "import sys; from rocmci.cli.program import main; sys.argv[0] = 'rocmci'; main()"]
INVALID = REPO / "tests" / "data" / "pipeline" / "source" / "invalid" / "deepep-wrong-arch.yaml"


def rocmci(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO, **kwargs) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("ROCMCI_")} | (env or {})
    return subprocess.run(
        [*ROCMCI, *args], cwd=cwd, env=full, capture_output=True, text=True, timeout=120, check=False, **kwargs
    )


# --- help and options are rocmci's -----------------------------------------------------------------------


def test_help_lists_rocmcis_tasks_and_options_only():
    done = rocmci("--help")
    assert done.returncode == 0, done.stderr
    for task in ("pipeline.plan", "image.check", "run.moe-tests", "workarounds", "settings"):
        assert re.search(rf"^  {re.escape(task)}\s", done.stdout, re.M), task
    options = re.findall(r"^\s+(-\w, --[\w-]+)", done.stdout, re.M)
    assert options == ["-h, --help", "-l, --list", "-V, --version"]
    for invoke_only in ("--dry", "--echo", "--config", "--pty", "--warn-only", "--complete", "--write-pyc", "STRING"):
        assert invoke_only not in done.stdout


@pytest.mark.parametrize("flag", sorted({"-R", "--dry", "-e", "--echo", "-f", "-d", "--complete", "-w", "-p"}))
def test_invokes_core_options_exit_2_with_one_line(flag, tmp_path):
    out = tmp_path / "p.yaml"
    done = rocmci(flag, "pipeline.generate", "--out", str(out))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"rocmci: {flag} is invoke's {INVOKE_OPTIONS[flag]}, an option rocmci does not have (see `rocmci --help`)"
    ]
    assert not out.exists()  # invoke's -R would have let the task run (and write) anyway


def test_an_invoke_option_after_the_task_is_an_unknown_flag(tmp_path):
    out = tmp_path / "p.yaml"
    done = rocmci("pipeline.generate", "--out", str(out), "-R")
    assert done.returncode == 2 and not out.exists()
    assert done.stderr.splitlines() == [
        "rocmci: unknown flag -R for rocmci pipeline.generate; see `rocmci pipeline.generate --help`"
    ]


def test_a_mistyped_flag_gets_did_you_mean():
    done = rocmci("pipeline.generate", "--sourc", "x")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "rocmci: unknown flag --sourc for rocmci pipeline.generate; did you mean --source?"
    ]


def test_a_mistyped_task_gets_did_you_mean():
    done = rocmci("pipeline.valdate")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["rocmci: unknown task 'pipeline.valdate'; did you mean pipeline.validate?"]
    assert rocmci("--help", "run.moe-test").stderr.strip().endswith("did you mean run.moe-tests?")


def test_a_flag_without_its_value_names_the_flag():
    done = rocmci("pipeline.plan", "--source")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["rocmci: --source needs a value (see `rocmci pipeline.plan --help`)"]


def test_task_help_shows_placeholders_and_kinds_never_invokes_string():
    done = rocmci("run.dp-example", "-h")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "STRING" not in text and "INT" not in text
    for spec in ("--tp N", "--dp N", "--max-model-len N", "-e, --env NAME=VALUE", "--public NAME", "--image IMAGE",
                 "--timeout SECONDS", "--gpus 0,1,...", "-n, --dry-run", "--vllm-src PATH"):  # fmt: skip
        assert re.search(rf"^  {re.escape(spec)}\s", text, re.M), spec
    assert "--only run|blocked|skipped" in rocmci("pipeline.plan", "--help").stdout


def test_version_and_list():
    assert rocmci("--version").stdout.startswith("rocmci ")
    listed = rocmci("--list").stdout.split("\n")
    assert any(line.startswith("pipeline.validate ") for line in listed)


# --- the edge of the process ------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["invoke", "rocmci.pipeline.tasks"])
def test_ctrl_c_while_the_imports_still_run_is_one_line_and_130(module):
    """Deterministic: the interrupt arrives exactly while a module is being imported (an import hook raises
    it): invoke before the task starts, the pipeline package inside the task body, where invoke's
    own handler would have turned it into a silent exit 1."""
    code = (
        "import sys\n"
        "class Hook:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name == {module!r}:\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Hook())\n"
        "from rocmci.cli.program import main\n"
        "sys.argv = ['rocmci', 'pipeline.validate']\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (130, "rocmci: interrupted\n")


def _python_start_seconds() -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
    return time.monotonic() - started


def test_ctrl_c_at_any_moment_after_start_up_is_one_line_and_130():
    """A real SIGINT at moments from the end of Python's own start-up to well into the run: never a
    traceback, never invoke's silent exit 1."""
    start = _python_start_seconds()
    for delay in (start, start + 0.05, start + 0.15, start + 0.3, start + 0.6, start + 1.0):
        proc = subprocess.Popen(
            [*ROCMCI, "pipeline.validate", "--source", str(INVALID)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        if proc.returncode == 1 and "error [deepep-arch]" in out:
            continue  # finished (with its findings) before the signal came
        if proc.returncode == -signal.SIGINT and err == "":
            continue  # Python had not installed its handler yet: the signal itself ended it (a shell shows 130)
        if "Traceback" in err and "rocmci" not in err:
            continue  # still inside Python's own start-up (site), before any rocmci code: README says so
        assert (proc.returncode, err) == (130, "rocmci: interrupted\n"), (delay, proc.returncode, err)


def test_stdout_that_cannot_be_written_is_one_line_and_exit_2():
    with open("/dev/full", "w") as full:
        done = subprocess.run([*ROCMCI, "settings"], cwd=REPO, stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=60, check=False)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == "rocmci: standard output: cannot write: No space left on device\n"


def test_a_reader_that_goes_away_ends_quietly(vllm_fixtures: Path):
    """`rocmci pipeline.plan | head -1`: the pipe closes while rocmci still writes 190 rows."""
    source = vllm_fixtures / "test-amd.yaml"
    writer = subprocess.Popen([*ROCMCI, "pipeline.plan", "--source", str(source)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    head = subprocess.run(["head", "-1"], stdin=writer.stdout, capture_output=True, text=True, timeout=120)
    writer.stdout.close()  # only head holds the pipe's reading end now: it goes away when head exits
    err = writer.stderr.read().decode()
    assert writer.wait(timeout=120) == 0 and err == "", err
    assert len(head.stdout.splitlines()) == 1


def test_an_encoding_that_cannot_show_the_text_replaces_it(tmp_path):
    changed = tmp_path / "changed.txt"
    changed.write_text("vllm/modèle_é.py\n", encoding="utf-8")
    done = rocmci("pipeline.plan", "--changed-files", str(changed), env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 0, done.stderr
    assert "vllm/mod?le_?.py" in done.stdout
    assert "Traceback" not in done.stderr


def test_control_characters_from_a_file_are_escaped_when_printed(tmp_path):
    changed = tmp_path / "changed.txt"
    changed.write_bytes(b"vllm/\x1b]0;pwned\x07x.py\n")
    done = rocmci("pipeline.plan", "--changed-files", str(changed))
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "vllm/\\e]0;pwned\\x07x.py" in done.stdout


# --- smaller promises of issue 23 -------------------------------------------------------------------------


def test_generate_and_validate_count_the_same_steps(tmp_path):
    out = tmp_path / "pipeline.yaml"
    generated = rocmci("pipeline.generate", "--out", str(out))
    validated = rocmci("pipeline.validate")
    assert generated.returncode == validated.returncode == 0, generated.stderr + validated.stderr
    count = re.search(r"in (\d+) generated steps", validated.stdout).group(1)
    assert generated.stderr.startswith(f"wrote {out}: {count} generated steps (the group 'AMD Tests' and the ")


def test_messages_for_users_name_no_sandbox_or_test_internals():
    from rocmci import arch, engine

    assert "--bridge=none" not in engine.START_HINT and "Docker service" in engine.START_HINT
    assert "unit tests" not in arch.DEEPEP_ARCHS_SOURCE and "shared/fixtures" not in arch.DEEPEP_ARCHS_SOURCE
