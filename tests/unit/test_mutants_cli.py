"""The `rocmci` command's face and edge, in process: exact exit codes, `rocmci: ...` lines, help text and
typed flag values (src/rocmci/cli: program.py, edge.py, flags.py, tasks.py).

Written for issue 24's mutation score: each test pins what a person or a script sees from `rocmci ARGS`
(stdout, stderr, the exit status README's table documents: 0 ok, 1 findings, 2 bad input or flag, 130
Ctrl-C, 143 SIGTERM) or the typed value a flag becomes, so a changed condition, name or message turns it
red. `program.main` runs here as the console script runs it (same argv, same streams), only without a
new interpreter: ~0.3 s saved per call. Streams and signal handlers main() changes are put back after
each call. No rocmci code is replaced.
"""

from __future__ import annotations

import importlib
import io
import os
import signal
import sys
from pathlib import Path

import pytest
from invoke import Exit

from rocmci import __version__, errors
from rocmci.cli import edge, flags, program
from rocmci.cli import tasks as tasksmod
from rocmci.errors import UsageError

TASK_NAMES = (
    "doctor", "image.build", "image.check", "image.inspect", "image.retarget", "pipeline.diff", "pipeline.generate",
    "pipeline.plan", "pipeline.validate", "run.bisect", "run.dp-example", "run.moe-tests", "run.outcome", "run.step",
    "settings",
    "version", "workarounds",
)  # fmt: skip


@pytest.fixture(autouse=True)
def _outside_any_workspace(tmp_path, monkeypatch):
    """No ROCMCI_* setting and no pyproject.toml of this repository changes what a task does."""
    for name in [n for n in os.environ if n.startswith("ROCMCI_")] + ["CI", "HF_TOKEN"]:
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)


def _main(*argv: str, stdout=None, stderr=None) -> int:
    """program.main(['rocmci', *argv]) with the given streams; its exit status. Streams and handlers restored."""
    saved = sys.stdout, sys.stderr
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    if stdout is not None:
        sys.stdout = stdout
    if stderr is not None:
        sys.stderr = stderr
    try:
        with pytest.raises(SystemExit) as ended:
            program.main(["rocmci", *argv])
    finally:
        sys.stdout, sys.stderr = saved
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return ended.value.code


@pytest.fixture
def rocmci(capsys):
    """rocmci(*argv) -> (exit status, stdout, stderr), as `rocmci ARGV` in a shell."""

    def call(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = _main(*argv)
        got = capsys.readouterr()
        return code, got.out, got.err

    return call


def _junit(tmp_path: Path, name: str = "test_ok", failure: str = "") -> Path:
    path = tmp_path / "junit.xml"
    body = f"<failure message='{failure}'>x</failure>" if failure else ""
    path.write_text(
        f'<testsuite name="pytest" tests="1" failures="{int(bool(failure))}" errors="0" skipped="0">'
        f'<testcase classname="t" name="{name}">{body}</testcase></testsuite>'
    )
    return path


# --- help, list, version: rocmci's own ---------------------------------------------------------------------

HELP_HEAD = "Usage: rocmci TASK [flags]    (rocmci TASK -h shows a task's flags)\n\nTasks:\n"
HELP_OPTIONS = (
    "\nOptions:\n"
    "  -h, --help [TASK]  this help, or a task's flags (rocmci TASK -h)\n"
    "  -l, --list         the tasks, one line each\n"
    "  -V, --version      rocmci's version\n"
)
OUTCOME_HELP = (
    "Usage: rocmci run.outcome [flags]\n\n"
    "Name the outcome of a run from its JUnit XML and exit status (passed, failed, crashed at teardown, ...).\n\n"
    "Flags:\n"
    "  --exit-code N                    the run's exit status, -255..255 (139 = died by SIGSEGV; required)\n"
    "  --json                           print JSON instead of text\n"
    "  --junit FILE                     JUnit XML written by the run (required)\n"
    "  --strict                         fail where vLLM's runner passes: an obsolete workaround, no tests collected\n"
    "  --workload moe-tests|dp-example  moe-tests or dp-example: which workarounds to name for a teardown crash"
    " (default: moe-tests)\n"
)


def _task_rows(out: str, indent: str) -> dict[str, str]:
    rows = {}
    for line in out.splitlines():
        assert line.startswith(indent), line
        name, _, doc = line[len(indent):].partition("  ")
        rows[name] = doc.strip()
    return rows


@pytest.mark.parametrize("argv", [("--help",), ("-h",), ()], ids=["--help", "-h", "nothing"])
def test_help_is_rocmcis_tasks_and_three_options(rocmci, argv):
    """`rocmci --help` (and `rocmci` alone): usage line, every task with its first doc paragraph, 3 options."""
    code, out, err = rocmci(*argv)
    assert (code, err) == (0, "")
    assert out.startswith(HELP_HEAD) and out.endswith(HELP_OPTIONS)
    rows = _task_rows(out[len(HELP_HEAD):-len(HELP_OPTIONS)], "  ")
    assert tuple(rows) == TASK_NAMES
    assert rows["version"] == (
        "Print rocmci's version (the same as `rocmci --version`; invoke's own version flag prints invoke's)."
    )
    assert rows["pipeline.validate"].startswith("Validate: YAML and duplicate keys, Buildkite's schema")


@pytest.mark.parametrize("argv", [("--list",), ("-l",), ("--list", "run.outcome")])
def test_list_is_one_line_per_task(rocmci, argv):
    """`rocmci --list`: each task and its summary, no indent, sorted; nothing else runs."""
    code, out, err = rocmci(*argv)
    assert (code, err) == (0, "")
    rows = _task_rows(out, "")
    assert tuple(rows) == TASK_NAMES
    assert rows["run.outcome"] == (
        "Name the outcome of a run from its JUnit XML and exit status (passed, failed, crashed at teardown, ...)."
    )


def test_the_first_paragraph_of_a_multi_paragraph_doc_is_one_line_in_the_list(rocmci, monkeypatch):
    """A task whose docstring has several lines and paragraphs is listed by its first paragraph, on one line."""

    def body(c):
        """First line
        continues here.

        Second paragraph, not listed."""

    t = tasksmod.rocmci_task(name="zz-doc")(body)
    monkeypatch.setattr(tasksmod, "ns", tasksmod.Collection(t))
    code, out, err = rocmci("--list")
    assert (code, out, err) == (0, "zz-doc  First line continues here.\n", "")


def test_a_task_without_a_doc_or_flag_help_is_listed_with_nothing_made_up(rocmci, monkeypatch):
    """A task with no docstring and a flag cli/flags.py does not know: listed and helped with empty text,
    the flag with the generic placeholder TEXT."""

    def bare(c, zz_extra=None):
        pass

    monkeypatch.setattr(tasksmod, "ns", tasksmod.Collection(tasksmod.rocmci_task(name="bare")(bare)))
    assert rocmci("--list") == (0, "bare\n", "")
    assert rocmci("bare", "-h") == (0, "Usage: rocmci bare [flags]\n\n\n\nFlags:\n  --zz-extra TEXT\n", "")


@pytest.mark.parametrize("argv", [("--version",), ("-V",), ("version",), ("-V", "-l"), ("--version", "nosuchtask")])
def test_version_prints_rocmcis_version_only(rocmci, argv):
    """--version wins over everything after it; the `version` task prints the same line."""
    assert rocmci(*argv) == (0, f"rocmci {__version__}\n", "")


@pytest.mark.parametrize(
    "argv", [("run.outcome", "-h"), ("-h", "run.outcome"), ("--help", "run.outcome"), ("--help=run.outcome",)]
)
def test_task_help_lists_its_flags_with_placeholders_and_help(rocmci, argv):
    """`rocmci TASK -h`: usage, the task's doc, its flags sorted, each with its value's kind and its help."""
    assert rocmci(*argv) == (0, OUTCOME_HELP, "")
    assert rocmci(*argv) == (0, OUTCOME_HELP, "")  # the same the second time in one process


def test_task_help_without_flags_has_no_flags_section(rocmci):
    """`rocmci version --help`: usage without ` [flags]`, the doc, and no empty Flags section."""
    code, out, err = rocmci("version", "--help")
    assert (code, err) == (0, "")
    assert out == (
        "Usage: rocmci version\n\n"
        "Print rocmci's version (the same as `rocmci --version`; invoke's own version flag prints invoke's).\n"
    )


def test_task_help_shows_short_flags_choices_and_overridden_help(rocmci):
    """-t/-e/-n/-k are the only short flags; a task's own help replaces the table's; -k is listed once."""
    _, build, _ = rocmci("image.build", "-h")
    lines = build.splitlines()
    assert any(line.startswith("  -t, --tag IMAGE ") for line in lines)
    assert any(line.startswith("  -n, --dry-run ") for line in lines)
    assert any(line.startswith("  --target test|ci_base|final|base ") and line.endswith("(default: test)")
               for line in lines)  # fmt: skip
    assert any(line.startswith("  --build-arg NAME=VALUE ") for line in lines)
    assert not any(line.startswith("  -j") or line.startswith("  -f,") for line in lines)  # no invoke auto shorts
    _, moe, _ = rocmci("run.moe-tests", "-h")
    assert "\n  -k EXPR " in moe and "-k, -k" not in moe
    assert "\n  -e, --env NAME=VALUE " in moe
    _, wa, _ = rocmci("workarounds", "-h")
    strict = "exit 1 when a workaround is obsolete; exit 2 when no evidence was given (CI uses this)"
    assert f"  --strict         {strict}" in wa
    assert "  --vllm-src PATH  vLLM checkout whose files and commits are the evidence (default: setting vllm_src)" in wa


def test_flags_named_after_python_keywords_show_their_placeholders(rocmci):
    """--for and --from (Python names for_ and from_) show their kinds, not invoke's STRING or TEXT."""
    _, doctor, _ = rocmci("doctor", "-h")
    assert "\n  --for build|run|pipeline  exit non-zero when something this task needs is missing" in doctor
    assert "\n  --host-root PATH          read /sys and /dev below this folder" in doctor
    _, retarget, _ = rocmci("image.retarget", "-h")
    assert "\n  --from IMAGE       vLLM ROCm image to rebuild rocSHMEM and DeepEP in" in retarget
    assert "\n  --arch ARCHS       archs to rebuild for, e.g. gfx950\n" in retarget


# --- parse errors: one line, exit 2 ------------------------------------------------------------------------


@pytest.mark.parametrize("option", sorted(program.INVOKE_OPTIONS))
def test_each_invoke_option_is_refused_by_name(rocmci, option):
    """invoke's core options are not rocmci's: one line naming invoke's long name, exit 2, the task not run."""
    code, out, err = rocmci(option, "version")
    assert (code, out) == (2, "")
    long = program.INVOKE_OPTIONS[option]
    assert err == f"rocmci: {option} is invoke's {long}, an option rocmci does not have (see `rocmci --help`)\n"


@pytest.mark.parametrize("task", TASK_NAMES)
def test_an_unknown_flag_after_any_task_is_exit_2(rocmci, task):
    """`rocmci TASK --bogus` exits 2 with one line naming the flag and the task (issue 24)."""
    code, out, err = rocmci(task, "--bogus")
    assert (code, out) == (2, "")
    assert err.startswith(f"rocmci: unknown flag --bogus for rocmci {task}; ") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("run.outcome", "--bogus"), "rocmci: unknown flag --bogus for rocmci run.outcome; see `rocmci run.outcome -"
                                     "-help`"),
        (("run.outcome", "-R"), "rocmci: unknown flag -R for rocmci run.outcome; see `rocmci run.outcome --help`"),
        (("run.outcome", "--jsn"), "rocmci: unknown flag --jsn for rocmci run.outcome; did you mean --json?"),
        (("run.outcome", "--workloa=x"), "rocmci: unknown flag --workloa for rocmci run.outcome; did you mean --work"
                                         "load?"),
        (("run.outcome", "--hepl"), "rocmci: unknown flag --hepl for rocmci run.outcome; did you mean --help?"),
        (("--bogus",), "rocmci: unknown flag --bogus for rocmci; see `rocmci --help`"),
        (("--hepl",), "rocmci: unknown flag --hepl for rocmci; did you mean --help?"),
        (("--lst",), "rocmci: unknown flag --lst for rocmci; did you mean --list?"),
        (("-x",), "rocmci: unknown flag -x for rocmci; see `rocmci --help`"),
        (("--bogusX",), "rocmci: unknown flag --bogusX for rocmci; see `rocmci --help`"),
        (("Xtask",), "rocmci: unknown task 'Xtask'; see `rocmci --list`"),
        (("run.outcme",), "rocmci: unknown task 'run.outcme'; did you mean run.outcome?"),
        (("nothing",), "rocmci: unknown task 'nothing'; see `rocmci --list`"),
        (("-h", "run.outcme"), "rocmci: unknown task 'run.outcme'; did you mean run.outcome?"),
        (("-h", "nothing"), "rocmci: unknown task 'nothing'; see `rocmci --list`"),
        (("run.outcome", "--junit"), "rocmci: --junit needs a value (see `rocmci run.outcome --help`)"),
        (("run.outcome", "--exit-code"), "rocmci: --exit-code needs a value (see `rocmci run.outcome --help`)"),
        (("image.build", "-t"), "rocmci: --tag needs a value (see `rocmci image.build --help`)"),
        (("run.moe-tests", "-k"), "rocmci: -k needs a value (see `rocmci run.moe-tests --help`)"),
    ],
)
def test_parse_errors_are_one_exact_line_and_exit_2(rocmci, argv, line):
    """Every parse error is one exact `rocmci: ...` line on stderr, nothing on stdout, exit 2 (README's table)."""
    assert rocmci(*argv) == (2, "", line + "\n")


def test_a_parse_error_invoke_words_otherwise_is_still_one_line_and_exit_2():
    """The text of a ParseError rocmci has no wording of its own for is kept, on one line, with where to look."""
    from invoke import ParseError

    usage_error = _usage_error_function()
    done = usage_error(ParseError("'x' is ambiguous when given\n after an optional-value flag"))
    assert isinstance(done, Exit) and done.code == 2
    assert done.message == (
        "rocmci: 'x' is ambiguous when given after an optional-value flag (see `rocmci --help` or `rocmci TASK --help`)"
    )
    top = usage_error(ParseError("Flag <Argument: help (h)> needed value and was not given one!"))
    assert (top.code, top.message) == (2, "rocmci: --help needs a value (see `rocmci --help`)")


def _usage_error_function():
    """program's usage_error, reached through the Program's parse_tasks (the only way invoke calls it)."""
    made, _ = program._program_class()
    return _closure(made.parse_tasks, "usage_error")


def _closure(method, name):
    func = method.__func__
    for cell_name, cell in zip(func.__code__.co_freevars, func.__closure__ or (), strict=False):
        if cell_name == name:
            return cell.cell_contents
    raise AssertionError(f"{name} not found")


def test_control_characters_in_an_unknown_flag_are_escaped(rocmci):
    """A mistyped flag is echoed as an escape, never sent to the terminal (ESC could clear the screen)."""
    code, out, err = rocmci("--x\x1b[2J")
    assert (code, out) == (2, "")
    assert err == "rocmci: unknown flag --x\\x1b[2J for rocmci; see `rocmci --help`\n"


def test_a_long_message_is_cut_by_the_error_renderer(rocmci, tmp_path):
    """stderr gets at most 4,000 characters of a message, saying how many were left out."""
    code, out, err = rocmci("-h", "t" * 5000)
    assert (code, out) == (2, "")
    whole = f"rocmci: unknown task '{'t' * 5000}'; see `rocmci --list`"
    assert err == whole[:4000] + f"... ({len(whole) - 4000} more characters)\n"


# --- tasks: flags parsed once, the task's exit status, its errors --------------------------------------------


def test_a_task_runs_with_its_typed_flags_and_its_exit_status(rocmci, tmp_path):
    """run.outcome: --exit-code parsed to an int, --json a switch; a failing run is exit 1, printed as JSON."""
    junit = _junit(tmp_path, "test_x", failure="boom")
    code, out, err = rocmci("run.outcome", "--junit", str(junit), "--exit-code", "1", "--json")
    assert (code, err) == (1, "")
    assert '"outcome": "failed"' in out and '"exit_code": 1' in out
    code, out, err = rocmci("run.outcome", "--junit", str(_junit(tmp_path)), "--exit-code", "0")
    assert (code, err) == (0, "") and "passed" in out


def test_a_task_error_is_one_line_with_its_exit_code(rocmci, tmp_path):
    """A RocmciError inside a task: `rocmci: <what>. <hint>` on stderr, its kind's exit code, nothing on stdout."""
    assert rocmci("run.outcome") == (
        2, "", "rocmci: run.outcome needs --junit FILE and --exit-code N. e.g. --junit r.xml --exit-code 139\n"
    )  # fmt: skip
    code, out, err = rocmci("run.outcome", "--junit", str(_junit(tmp_path)), "--exit-code", "300")
    assert (code, out, err) == (2, "", "rocmci: --exit-code must be between -255 and 255, got 300\n")


@pytest.mark.parametrize(("status", "code"), [(3, 3), (None, 0), ("a message", 1)])
def test_a_task_that_calls_sys_exit_keeps_its_status(rocmci, monkeypatch, status, code):
    """sys.exit(n) inside a task is exit n, as for any Python program (a string: 1, None: 0)."""

    def body(c):
        """Exits."""
        sys.exit(status)

    monkeypatch.setattr(tasksmod, "ns", tasksmod.Collection(tasksmod.rocmci_task(name="quits")(body)))
    assert rocmci("quits") == (code, "", "")


def test_a_stdout_closed_at_the_end_keeps_the_tasks_status(monkeypatch):
    """A stream that is already closed when rocmci flushes it at the end: the task's own status stands."""
    assert _main("--version", stdout=_Raising(on_flush=ValueError("I/O operation on closed file"))) == 0
    assert _main("-h", "nothing", stdout=_Raising(on_flush=ValueError("I/O operation on closed file"))) == 2


def test_settings_task_takes_its_json_switch(rocmci):
    """`rocmci settings --json` prints JSON, without it the table: the switch reaches the task."""
    code, out, err = rocmci("settings", "--json")
    assert (code, err) == (0, "")
    assert out.startswith("{\n") and '"arch": {' in out
    code, out, _ = rocmci("settings")
    assert code == 0 and out.startswith("setting ")


# --- the edge of the process: Ctrl-C, SIGTERM, stdout faults, encodings ---------------------------------------


class _Raising(io.StringIO):
    """A stdout whose write (or flush) raises what a signal handler or a dead reader would raise there."""

    def __init__(self, on_write: BaseException | None = None, on_flush: BaseException | None = None) -> None:
        super().__init__()
        self.on_write, self.on_flush = on_write, on_flush

    def write(self, text: str) -> int:
        if self.on_write is not None:
            raise self.on_write
        return super().write(text)

    def flush(self) -> None:
        if self.on_flush is not None:
            raise self.on_flush


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [(KeyboardInterrupt(), 130, "rocmci: interrupted\n"), (errors.Terminated(), 143, "rocmci: terminated\n")],
)
def test_ctrl_c_or_sigterm_outside_a_task_is_one_line_and_its_code(capsys, raised, code, line):
    """Ctrl-C while help is printed: exit 130 and one line; SIGTERM: 143; then a second Ctrl-C is ignored."""
    saved, handlers = sys.stdout, {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    sys.stdout = _Raising(on_write=raised)
    try:
        with pytest.raises(SystemExit) as ended:
            program.main(["rocmci", "--version"])
        after = signal.getsignal(signal.SIGINT)
    finally:
        sys.stdout = saved
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    assert (ended.value.code, capsys.readouterr().err) == (code, line)
    assert after is signal.SIG_IGN


def test_ctrl_c_during_the_final_flush_is_130(capsys):
    """Ctrl-C while rocmci flushes stdout at the very end is still one line and 130."""
    assert _main("--version", stdout=_Raising(on_flush=KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == "rocmci: interrupted\n"


def test_sigterm_inside_a_task_is_143(capsys, tmp_path):
    """The task edge turns SIGTERM into Terminated: exit 143, `rocmci: terminated`."""
    assert _main("--version", stdout=_Raising(on_write=errors.Terminated())) == 143

    def body():
        os.kill(os.getpid(), signal.SIGTERM)
        return 0

    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # if the edge did not install its handler: no exit
    try:
        with pytest.raises(Exit) as caught:
            edge.run(body)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (caught.value.code, caught.value.message) == (143, "rocmci: terminated")


def _full_stdout(buffering: int = -1):
    return open("/dev/full", "w", buffering=buffering)  # noqa: SIM115 - closed by the test


@pytest.mark.parametrize("buffering", [-1, 1], ids=["at-exit", "while-printing"])
def test_stdout_on_a_full_disk_is_one_line_and_exit_2(capsys, buffering):
    """ENOSPC on stdout (`rocmci --help > /dev/full`): `rocmci: standard output: cannot write: ...`, exit 2,
    whether it fails when Python flushes at the end or while help is being printed."""
    with _full_stdout(buffering) as full:
        assert _main("--help", stdout=full) == 2
    assert capsys.readouterr().err == "rocmci: standard output: cannot write: No space left on device\n"


def test_a_full_disk_inside_a_task_is_one_line_and_exit_2(capsys):
    """ENOSPC while a task prints (not at exit): the same one line, exit 2."""
    with _full_stdout(1) as full:
        assert _main("settings", stdout=full) == 2
    assert capsys.readouterr().err == "rocmci: standard output: cannot write: No space left on device\n"


@pytest.mark.parametrize("argv", [("--version",), ("settings",), ("run.outcome", "-h")])
def test_a_closed_stdout_is_one_line_and_exit_2(capsys, argv):
    """`rocmci ... >&-` (Python sets sys.stdout to None): one line, exit 2, never a traceback."""
    saved = sys.stdout
    sys.stdout = None
    try:
        code = _main(*argv)
    finally:
        sys.stdout = saved
    assert code == 2
    assert capsys.readouterr().err == "rocmci: standard output: cannot write: Bad file descriptor\n"


def _pipe_without_reader(buffering: int = -1):
    read, write = os.pipe()
    os.close(read)
    return open(write, "w", buffering=buffering)  # noqa: SIM115 - closed by the test


@pytest.mark.parametrize("buffering", [-1, 1], ids=["at-exit", "while-printing"])
@pytest.mark.parametrize("argv", [("--help",), ("settings",)])
def test_a_reader_that_went_away_ends_quietly(capsys, buffering, argv):
    """`rocmci ... | head` after head exited: exit 0, nothing on stderr, and stdout then points at /dev/null."""
    with _pipe_without_reader(buffering) as pipe:
        assert _main(*argv, stdout=pipe) == 0
        os.write(pipe.fileno(), b"more")  # /dev/null now: a closed pipe would raise BrokenPipeError
    assert capsys.readouterr().err == ""


def test_stdout_that_cannot_take_the_text_gets_replacement_characters():
    """An ASCII stdout (PYTHONIOENCODING=ascii): characters it cannot carry become '?', not a traceback; on an
    ASCII stderr they become backslash escapes."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii", newline="\n")
    err = io.TextIOWrapper(io.BytesIO(), encoding="ascii", newline="\n")
    assert _main("--help", "t\u00e2che", stdout=out, stderr=err) == 2
    err.flush()
    assert err.buffer.getvalue() == b"rocmci: unknown task 't\\xe2che'; see `rocmci --list`\n"
    out2 = io.TextIOWrapper(io.BytesIO(), encoding="ascii", newline="\n")
    sys.stdout, saved = out2, sys.stdout
    try:
        program._harden_streams()
        print("mod\u00e8le")
        sys.stdout.flush()
    finally:
        sys.stdout = saved
    assert out2.buffer.getvalue() == b"mod?le\n"


def test_the_guarded_stdout_passes_text_and_attributes_through():
    """The wrapper main() puts on stdout writes and counts as the stream does and forwards its other attributes."""
    inner = io.StringIO()
    guarded = program._GuardedStdout(inner)
    assert guarded.write("abc") == 3
    guarded.flush()
    assert inner.getvalue() == "abc" and guarded.getvalue() == "abc" and guarded.closed is False
    full = _full_stdout()
    g = program._GuardedStdout(full)
    assert g.write("x") == 1  # buffered
    with pytest.raises(program.StdoutFault, match="^No space left on device$"):
        g.flush()
    with pytest.raises(program.StdoutFault, match="^No space left on device$"):
        program._GuardedStdout(_full_stdout(1)).write("line\n")
    os.close(full.fileno())  # the buffer still holds "x": close the descriptor so nothing tries again
    pipe = program._GuardedStdout(_pipe_without_reader(1))
    with pytest.raises(BrokenPipeError):
        pipe.write("x\n")
    with pytest.raises(BrokenPipeError):
        pipe.flush()


@pytest.mark.parametrize("where", ["write", "flush"])
def test_a_stdout_error_without_an_errno_is_still_named(capsys, where):
    """An OSError with no strerror (one a Python-level stream raises): its own text ends the line, exit 2."""
    fault = OSError("stream is not writable")
    stream = _Raising(on_write=fault) if where == "write" else _Raising(on_flush=fault)
    assert _main("--version", stdout=stream) == 2
    assert capsys.readouterr().err == "rocmci: standard output: cannot write: stream is not writable\n"


def test_harden_streams_wraps_stdout_once(monkeypatch):
    """stdout is wrapped once however often main() runs; a missing stdout gets the closed stand-in."""
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    program._harden_streams()
    first = sys.stdout
    assert isinstance(first, program._GuardedStdout)
    program._harden_streams()
    assert sys.stdout is first
    monkeypatch.setattr(sys, "stdout", None)
    program._harden_streams()
    closed = sys.stdout
    program._harden_streams()
    assert sys.stdout is closed and not isinstance(closed, program._GuardedStdout)


def test_an_error_line_reaches_a_closed_stderr_without_a_traceback(capsys):
    """stderr gone too (`rocmci --bogus 2>&-`): the exit code is all that is left, still 2."""
    dead = io.StringIO()
    dead.close()
    assert _main("--bogus", stderr=dead) == 2


# --- edge.run: the one place a task's errors become exit codes ---------------------------------------------


def _raise(exc):
    def body(*_):
        raise exc

    return body


def test_a_long_error_message_is_cut_at_4000_characters():
    """A task's error message is cut at 4,000 characters, saying how many were left out."""
    with pytest.raises(Exit) as caught:
        edge.run(_raise(UsageError("x" * 4500)))
    assert caught.value.message == "rocmci: " + "x" * 4000 + "... (500 more characters)"
    with pytest.raises(Exit) as caught:
        edge.run(_raise(UsageError("y" * 4000)))
    assert caught.value.message == "rocmci: " + "y" * 4000


def test_an_error_message_from_a_file_is_escaped():
    """A message quoting a file's text shows control characters as escapes, with its file:line."""
    with pytest.raises(Exit) as caught:
        edge.run(_raise(errors.InputError("bad \x1b]0;x\x07 value", where="a.yaml:3")))
    assert (caught.value.code, caught.value.message) == (2, "rocmci: a.yaml:3: bad \\e]0;x\\x07 value")


def test_a_closed_pipe_inside_a_task_is_a_quiet_exit_0(monkeypatch):
    """BrokenPipeError in a task: exit 0 with no message, and stdout's descriptor now writes to /dev/null."""
    with _pipe_without_reader() as pipe:
        monkeypatch.setattr(sys, "stdout", pipe)
        with pytest.raises(Exit) as caught:
            edge.run(_raise(BrokenPipeError()))
        assert (caught.value.code, caught.value.message) == (0, None)
        assert os.write(pipe.fileno(), b"x") == 1


def test_a_task_gets_its_flags_typed_or_none():
    """edge.run hands a task its flags parsed (invoke's `c` dropped), or calls it bare when it has none."""
    got = []
    assert edge.run(lambda v: got.append(v), {"c": object(), "tp": "3", "json": 1, "gpus": None}) is None
    (v,) = got
    assert (v.tp, v.json, v.gpus) == (3, True, None)
    assert edge.run(lambda: got.append("no flags")) is None and got[-1] == "no flags"


# --- RocmciTask and rocmci_task: flags declared once -------------------------------------------------------


def test_a_task_built_from_a_body_gets_the_tables_help_and_chosen_short_flags():
    """A task's flags get cli/flags.py's help, only the chosen short flags, list kind for repeatables."""
    def body(c, tag=None, env=None, k=None, dry_run=False, json=False, gpus=None, strict=False):
        """Doc."""

    t = edge.RocmciTask(body, help={"strict": "its own help"})
    args = {a.attr_name or a.name: a for a in t.get_arguments()}
    assert sorted(args["tag"].names) == ["t", "tag"]
    assert sorted(args["env"].names) == ["e", "env"]
    assert args["k"].names == ("k",)
    assert sorted(args["dry_run"].names) == ["dry-run", "n"]
    assert args["json"].names == ("json",) and args["gpus"].names == ("gpus",)
    assert args["strict"].help == "its own help"
    for name in ("tag", "env", "k", "dry_run", "json", "gpus"):
        assert args[name].help == flags.help_text(name), name
    assert args["gpus"].help == flags.FLAGS["gpus"].help
    assert args["env"].kind is list and args["gpus"].kind is str
    assert args["json"].kind is bool
    assert {a.attr_name or a.name: a.help for a in t.get_arguments()} == {n: a.help for n, a in args.items()}


def test_a_task_may_name_its_own_iterable_flags():
    """A task that names its iterable flags keeps that choice over REPEATABLE."""
    def body(c, env=None, gpus=None):
        """Doc."""

    t = edge.RocmciTask(body, iterable=["gpus"])
    args = {a.name: a for a in t.get_arguments()}
    assert args["gpus"].kind is list and args["env"].kind is str


_SEEN: list = []


def test_repeatable_flags_keep_every_value(rocmci, tmp_path):
    """--env twice, --public twice: both kept (invoke's iterable), parsed to pairs and names."""
    def body(c, env=None, public=None, label=None):
        """Doc."""
        edge.run(_SEEN.append, dict(locals()))

    t = tasksmod.rocmci_task(name="probe")(body)
    from invoke import Collection

    ns = Collection(t)
    from invoke import Program

    Program(namespace=ns, binary="x").run(
        ["x", "probe", "-e", "A=1", "--env", "B=2", "--public", "A", "--public", "B", "--label", "l1"], exit=False
    )
    v = _SEEN.pop()
    assert v.env.as_dict() == {"A": "1", "B": "2"} and v.public == {"A", "B"} and v.label == ("l1",)


def test_rocmci_task_makes_rocmci_tasks_with_or_without_arguments():
    """@rocmci_task and @rocmci_task(name=...) both make RocmciTasks with the table's help."""
    def body(c, json=False):
        """Doc."""

    bare = tasksmod.rocmci_task(body)
    named = tasksmod.rocmci_task(name="other", aliases=("o",))(body)
    assert isinstance(bare, edge.RocmciTask) and isinstance(named, edge.RocmciTask)
    assert bare.name == "body" and (named.name, named.aliases) == ("other", ("o",))
    assert [a.help for a in named.get_arguments()] == ["print JSON instead of text"]


def test_the_task_collection_is_the_same_when_built_again():
    """Reloading cli/tasks.py builds the same tasks, flags and help as the first import."""

    def shape(ns):
        out = {}
        for name in ns.task_names:
            t = ns[name]
            out[name] = sorted((tuple(sorted(a.names)), a.help, a.kind.__name__) for a in t.get_arguments())
        return out

    before = shape(tasksmod.ns)
    reloaded = importlib.reload(tasksmod)
    assert shape(reloaded.ns) == before
    assert sorted(reloaded.ns.task_names) == sorted(TASK_NAMES)
    env = next(a for a in reloaded.ns["run.moe-tests"].get_arguments() if a.name == "env")
    assert env.kind is list and sorted(env.names) == ["e", "env"]


# --- flags: each parsed once into its typed value ------------------------------------------------------------


def test_the_flag_table_built_afresh_bounds_and_chooses_the_same():
    """cli/flags.py's table made again (a reload, as at start-up): every bounded flag keeps both bounds and
    every choice flag its choices, in the messages a user sees."""
    reloaded = importlib.reload(flags)
    bounds = {"tp": (1, 64), "dp": (1, 64), "shards": (1, 32), "timeout": (1, 604800), "examples": (0, 100000),
              "parallel_job": (0, 99), "exit_code": (-255, 255), "max_model_len": (1, 10_000_000)}  # fmt: skip
    for name, (low, high) in bounds.items():
        text = reloaded.flag_text(name)
        assert getattr(reloaded.parse({name: str(low)}), name) == low
        assert getattr(reloaded.parse({name: str(high)}), name) == high
        for bad in (low - 1, high + 1):
            with pytest.raises(UsageError) as caught:
                reloaded.parse({name: str(bad)})
            assert caught.value.one_line() == f"{text} must be between {low} and {high}, got {bad}"
    choices = {"mode": flags.MODES, "workload": flags.WORKLOADS, "format": flags.FORMATS, "target": flags.TARGETS,
               "for_": flags.PURPOSES, "only": flags.ONLY, "backend": flags.BACKENDS}  # fmt: skip
    for name, allowed in choices.items():
        assert [getattr(reloaded.parse({name: c}), name) for c in allowed] == list(allowed)
        with pytest.raises(UsageError) as caught:
            reloaded.parse({name: "qqq"})
        text = reloaded.flag_text(name)
        assert caught.value.one_line() == f"unknown {text} 'qqq'. choose one of: {', '.join(allowed)}"
    assert reloaded.parse({"build_id": "12"}).build_id == "12"


def test_help_text_shows_a_default_only_when_there_is_one_to_show():
    """`-h` appends `(default: X)` for real defaults, never for (), frozenset() or no pairs."""
    assert flags.help_text("format") == "output format: yaml or json (default: yaml)"
    assert flags.help_text("examples") == "how many differences to print (default: 20)"
    assert flags.help_text("host_root").endswith("(for fake device trees) (default: /)")
    assert flags.help_text("json") == "print JSON instead of text"  # default None
    assert flags.help_text("label") == flags.FLAGS["label"].help  # () is not shown
    assert flags.help_text("public") == flags.FLAGS["public"].help  # frozenset() is not shown
    assert flags.help_text("env") == flags.FLAGS["env"].help  # no pairs is not shown
    assert flags.help_text("tp") == "tensor parallel size (-tp) (default: 1)"


def test_flag_text_is_the_flag_as_typed():
    """Messages name a flag as the user types it: --for, --from, --dry-run."""
    assert [flags.flag_text(n) for n in ("for_", "from_", "dry_run", "max_model_len", "k")] == [
        "--for", "--from", "--dry-run", "--max-model-len", "--k"
    ]  # fmt: skip


def test_placeholders():
    """A valued flag's placeholder; an unknown name gets TEXT, never invoke's STRING."""
    assert flags.placeholder("format") == "yaml|json"
    assert flags.placeholder("not_a_flag") == "TEXT"


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("tp", "1", 1), ("tp", "64", 64), ("dp", "64", 64), ("shards", "32", 32), ("timeout", "604800", 604800),
        ("timeout", "1", 1), ("examples", "0", 0), ("examples", "100000", 100000), ("parallel_job", "0", 0),
        ("parallel_job", "99", 99), ("exit_code", "-255", -255), ("exit_code", "255", 255),
        ("max_model_len", "10000000", 10_000_000), ("max_model_len", "1", 1),
        ("mode", "low-latency", "low-latency"), ("backend", "mori", "mori"), ("only", "skipped", "skipped"),
        ("for_", "pipeline", "pipeline"), ("target", "base", "base"), ("workload", "dp-example", "dp-example"),
        ("format", "json", "json"), ("k", "not slow", "not slow"), ("model", "m/x", "m/x"),
        ("build_id", "4711", "4711"), ("build_arg", ["max_jobs=8", "A_B=x=y", "E="], (("max_jobs", "8"),
         ("A_B", "x=y"), ("E", ""))), ("label", ["a", "b" * 100], ("a", "b" * 100)),
        ("out", "p.yaml", "p.yaml"), ("json", 0, False), ("push", "x", True),
    ],
)  # fmt: skip
def test_each_flag_is_parsed_once_into_its_typed_value(name, raw, value):
    """Each flag's text becomes its typed value, at both ends of every bound."""
    assert getattr(flags.parse({name: raw}), name) == value


LABEL_HINT = "printable text of 1 to 100 characters"
BUILD_ARG_HINT = "e.g. --build-arg max_jobs=8"


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"tp": "65"}, "--tp must be between 1 and 64, got 65"),
        ({"tp": "0"}, "--tp must be between 1 and 64, got 0"),
        ({"dp": "65"}, "--dp must be between 1 and 64, got 65"),
        ({"shards": "33"}, "--shards must be between 1 and 32, got 33"),
        ({"timeout": "604801"}, "--timeout must be between 1 and 604800, got 604801"),
        ({"examples": "-1"}, "--examples must be between 0 and 100000, got -1"),
        ({"examples": "100001"}, "--examples must be between 0 and 100000, got 100001"),
        ({"parallel_job": "100"}, "--parallel-job must be between 0 and 99, got 100"),
        ({"parallel_job": "-1"}, "--parallel-job must be between 0 and 99, got -1"),
        ({"max_model_len": "0"}, "--max-model-len must be between 1 and 10000000, got 0"),
        ({"max_model_len": "10000001"}, "--max-model-len must be between 1 and 10000000, got 10000001"),
        ({"only": "ran"}, "unknown --only 'ran'. did you mean 'run'?"),
        ({"for_": "bild"}, "unknown --for 'bild'. did you mean 'build'?"),
        ({"mode": "zzz"}, "unknown --mode 'zzz'. choose one of: high-throughput, low-latency, both"),
        ({"build_id": "4711;rm"}, "--build-id '4711;rm' is not a build id. give BUILDKITE_BUILD_ID, e.g. --build-i"
                                  "d 4711"),
        ({"build_arg": ["max_jobs"]}, "--build-arg (an item of 8 characters, not shown) must be NAME=VALUE. e.g. --b"
                                 "uild-arg max_jobs=8"),  # the item may be the value alone: never quoted
        ({"build_arg": ["A=1", "9x=1"]}, "--build-arg '9x' must be NAME=VALUE. e.g. --build-arg max_jobs=8"),
        ({"build_arg": ["-A=1"]}, "--build-arg '-A' must be NAME=VALUE. e.g. --build-arg max_jobs=8"),
        ({"build_arg": ["A-B=1"]}, "--build-arg 'A-B' must be NAME=VALUE. e.g. --build-arg max_jobs=8"),
        ({"build_arg": ["N" * 129 + "=1"]}, f"--build-arg '{'N' * 56}... must be NAME=VALUE. {BUILD_ARG_HINT}"),
        ({"label": ["ok", "x" * 101]}, f"--label '{'x' * 56}... is not a label name. {LABEL_HINT}"),
        ({"label": ["y" * 40 + "\n"]}, f"--label '{'y' * 40}\\n' is not a label name. {LABEL_HINT}"),
        ({"label": ["z" * 40]}, None),
        ({"label": ["w" * 39 + "\n"]}, f"--label '{'w' * 39}\\n' is not a label name. {LABEL_HINT}"),
        ({"label": ["\t"]}, f"--label '\\t' is not a label name. {LABEL_HINT}"),
    ],
)  # fmt: skip
def test_bad_values_are_one_exact_line(given, message):
    """A bad flag value is UsageError (exit 2) with the exact one-line message and hint."""
    if message is None:
        assert flags.parse(given).label == ("z" * 40,)
        return
    with pytest.raises(UsageError) as caught:
        flags.parse(given)
    assert caught.value.one_line() == message
    assert caught.value.exit_code == 2


def test_a_128_character_build_arg_name_is_accepted():
    """--build-arg names up to 128 characters are accepted (the bound is inclusive)."""
    assert flags.parse({"build_arg": ["N" * 128 + "=1"]}).build_arg == (("N" * 128, "1"),)


def test_not_given_is_the_one_default_and_given_is_never_replaced():
    """A flag not given gets its one default from cli/flags.py; an empty value of a non-repeatable flag is
    checked, not defaulted."""
    v = flags.parse({"c": object(), "format": None, "label": [], "env": [], "public": None, "build_arg": [],
                     "json": False, "model": None, "vllm_src": None, "arch": "gfx942", "examples": None})  # fmt: skip
    assert not hasattr(v, "c")
    assert (v.format, v.label, v.public, v.build_arg, v.json, v.model, v.examples) == (
        "yaml", (), frozenset(), (), False, "Qwen/Qwen1.5-MoE-A2.7B", 20
    )  # fmt: skip
    assert v.env.as_dict() == {} and v.vllm_src is None and v.arch == "gfx942"
    with pytest.raises(UsageError, match="must be GPU indices"):
        flags.parse({"gpus": ""})  # only repeatable flags treat an empty value as "not given"


def test_settings_backed_flags_stay_as_given_for_the_settings_registry():
    """--network, --vllm-src, --arch: kept as typed (settings.convert parses them), not given is None."""
    v = flags.parse({"network": "host", "vllm_src": None, "arch": "gfx950"})
    assert (v.network, v.vllm_src, v.arch) == ("host", None, "gfx950")
    assert repr(flags.Values({"a": 1})) == "Values({'a': 1})"
