from rocmci import errors


def test_each_kind_has_its_own_exit_code():
    kinds = [errors.UsageError, errors.EngineError, errors.BuildError, errors.PreflightError, errors.FindingsError]
    codes = [k.exit_code for k in kinds]
    assert len(set(codes)) == len(codes)
    assert errors.InputError.exit_code == errors.UsageError.exit_code == 2  # bad input of either kind


def test_message_is_one_line_with_the_next_step():
    exc = errors.EngineError("the Docker engine is not running.", hint="start dockerd")
    assert exc.one_line() == "the Docker engine is not running. start dockerd"
    assert "\n" not in exc.one_line()
    where = errors.InputError("duplicate key 'label'", where="a.yaml:3:5")
    assert str(where) == "a.yaml:3:5: duplicate key 'label'"


def test_workload_error_carries_its_outcome_code():
    assert errors.WorkloadError("crashed at teardown", exit_code=6).exit_code == 6
