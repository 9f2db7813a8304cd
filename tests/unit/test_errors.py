import pytest
from invoke import Exit

from rocmci import errors
from rocmci.cli import edge

KINDS = [errors.FindingsError, errors.UsageError, errors.InputError, errors.EngineError, errors.BuildError,
         errors.PreflightError]  # fmt: skip


def test_each_kind_has_its_own_exit_code():
    codes = {k: k.exit_code for k in KINDS}
    assert codes == {
        errors.FindingsError: 1,
        errors.UsageError: 2,
        errors.InputError: 2,  # bad input of either kind: README's "2 bad flag, setting or unreadable input"
        errors.EngineError: 3,
        errors.BuildError: 4,
        errors.PreflightError: 5,
    }


def test_message_is_one_line_with_the_next_step():
    exc = errors.EngineError("the Docker engine is not running.", hint="start dockerd")
    assert exc.one_line() == "the Docker engine is not running. start dockerd"
    where = errors.InputError("duplicate key 'label'", where="a.yaml:3:5")
    assert str(where) == "a.yaml:3:5: duplicate key 'label'"


def test_library_text_with_newlines_and_runs_of_spaces_becomes_one_line():
    exc = errors.BuildError("failed at step 3:\n  exit code: 3\n\n\ttail of log.", hint="see   the log\n above")
    assert exc.one_line() == "failed at step 3: exit code: 3 tail of log. see the log above"
    assert str(exc) == exc.one_line()  # what a caller that prints the exception shows
    assert errors.UsageError("no hint here...").one_line() == "no hint here"  # trailing periods dropped


def _raise(exc):
    def command(**_kwargs):
        raise exc

    return command


@pytest.mark.parametrize("kind", KINDS)
def test_the_edge_turns_each_kind_into_its_exit_code_and_one_rocmci_line(kind):
    with pytest.raises(Exit) as caught:
        edge.run(_raise(kind("it broke\nbadly", hint="fix it")))
    assert caught.value.code == kind.exit_code
    assert caught.value.message == "rocmci: it broke badly. fix it"


def test_a_workload_error_exits_with_the_outcome_code_it_carries():
    with pytest.raises(Exit) as caught:
        edge.run(_raise(errors.WorkloadError("crashed at teardown", exit_code=11)))
    assert (caught.value.code, caught.value.message) == (11, "rocmci: crashed at teardown")


def test_ctrl_c_and_sigterm_have_their_codes_and_other_exceptions_are_not_swallowed():
    for exc, code, line in ((KeyboardInterrupt(), 130, "interrupted"), (errors.Terminated(), 143, "terminated")):
        with pytest.raises(Exit) as caught:
            edge.run(_raise(exc))
        assert (caught.value.code, caught.value.message) == (code, f"rocmci: {line}")
    with pytest.raises(ZeroDivisionError):  # a bug is a traceback, not a disguised user error
        edge.run(_raise(ZeroDivisionError("a bug")))


def test_a_nonzero_return_becomes_the_exit_code_with_no_message():
    with pytest.raises(Exit) as caught:
        edge.run(lambda: 12)
    assert (caught.value.code, caught.value.message) == (12, None)
    assert edge.run(lambda: 0) is None
