"""run.bisect's search: the order of tries and the answer follow from the verdicts alone."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmci.runs import bisect as bs

COMMITS = [f"c{i}" for i in range(16)]


@pytest.mark.parametrize(
    ("outcomes", "any_fails", "expected"),
    [
        (["passed"], True, bs.GOOD), (["passed", "passed"], True, bs.GOOD), (["passed", "failed"], True, bs.BAD),
        (["passed", "failed"], False, bs.SKIP), (["failed", "failed"], False, bs.BAD), ([], True, bs.SKIP),
        (["crashed at teardown"], True, bs.SKIP), (["passed", "infrastructure error"], True, bs.SKIP),
        (["no tests collected"], True, bs.SKIP),
    ],
)  # fmt: skip
def test_only_passed_and_failed_decide(outcomes, any_fails, expected):
    assert bs.verdict(outcomes, any_fails=any_fails) == expected


def search_for(first_bad: int, skipped: frozenset[int] = frozenset()) -> tuple[bs.Answer, list[int]]:
    search = bs.Search(COMMITS, {})
    order = []
    while (commit := search.next()) is not None:
        i = COMMITS.index(commit)
        order.append(i)
        search.verdicts[commit] = bs.SKIP if i in skipped else bs.BAD if i >= first_bad else bs.GOOD
    return search.answer(), order


def test_the_first_try_is_the_middle_and_a_skip_gives_way_to_its_neighbour():
    assert search_for(4)[1][:2] == [7, 3]
    _, order = search_for(4, frozenset({7}))
    assert order[:2] == [7, 6]  # the nearest untried commit, the older one first


@settings(derandomize=True, max_examples=200, deadline=None)
@given(st.integers(0, 15), st.frozensets(st.integers(0, 14), max_size=4))
def test_the_answer_is_the_first_bad_commit_or_the_suspects_that_hide_it(first_bad, skipped):
    answer, order = search_for(first_bad, skipped)
    assert len(order) == len(set(order))  # no commit is tried twice
    assert len(order) <= math.ceil(math.log2(16)) + 2 * len(skipped)  # a skip costs at most two more tries
    assert COMMITS[first_bad] in answer.suspects
    if answer.exact:
        assert answer.first_bad == COMMITS[first_bad]
        tried_good = [i for i in order if i < first_bad and i not in skipped]
        assert answer.last_good == (COMMITS[max(tried_good)] if tried_good else None)
    else:
        assert set(answer.suspects) - {answer.first_bad} <= {COMMITS[i] for i in skipped}


def test_a_git_that_never_answers_ends_in_one_line_within_the_bound(tmp_path, monkeypatch):
    """The bisect's git calls are bounded by git_timeout and kill git's whole process group: a transport it
    started (here a grandchild that sleeps) does not outlive the bound, and the line says git did not answer."""
    import time
    from pathlib import Path

    from rocmci.errors import UsageError
    from rocmci.runs import bisectrun

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    transport = bin_dir / "transport"  # its path, unique to this test, finds it among the host's processes
    transport.write_text("#!/bin/sh\nsleep 300\n")
    (bin_dir / "git").write_text(f"#!/bin/sh\n{transport} &\n{transport}\n")
    for script in (transport, bin_dir / "git"):
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    started = time.monotonic()
    with pytest.raises(UsageError, match=r"--good: git did not answer within 1 s") as caught:
        bisectrun.resolve(tmp_path, "main", "--good", timeout=1)
    assert time.monotonic() - started < 30
    assert "git_timeout" in (caught.value.hint or "")

    def alive() -> list[str]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if str(transport).encode() in cmdline.read_bytes():
                    found.append(cmdline.parent.name)
            except OSError:
                continue
        return found

    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive() == [], "git's transport outlived the bound"


def test_a_step_that_bad_does_not_hold_is_refused_before_any_candidate(tmp_path):
    """--bad is where the step failed, so the step is one of --bad's: a typo is exit 2 with did-you-mean, in a
    dry run too, instead of a search whose every candidate is "skipped"."""
    import subprocess

    from tests.conftest import run_invoke

    steps = tmp_path / "vllm" / ".buildkite" / "test-amd.yaml"
    steps.parent.mkdir(parents=True)
    steps.write_text("steps:\n- label: Kernels MoE\n  agent_pool: mi325_1\n  mirror_hardwares: [amdproduction]\n"
                     "  commands: [pytest -q t.py]\n")  # fmt: skip
    (steps.parents[1] / "setup.py").write_text("# vLLM's (a checkout has one)\n")
    (steps.parents[1] / "docker").mkdir()
    (steps.parents[1] / "docker" / "Dockerfile.rocm").write_text("FROM scratch\n")
    git = ["git", "-C", str(steps.parents[1]), "-c", "user.email=t@t", "-c", "user.name=t",
           "-c", "commit.gpgsign=false"]  # fmt: skip
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "good"], ["commit", "-qm", "bad", "--allow-empty"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    for extra in ((), ("-n",)):
        done = run_invoke("run.bisect", "--step", "Kernels MoF", "--good", "HEAD~1", "--bad", "HEAD", *extra,
                          cwd=steps.parents[1])  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("rocmci: no step 'Kernels MoF' in --bad ") and "Kernels MoE" in line, line


def test_the_bisect_report_passes_the_output_gate(capsys):
    """A skip's why quotes a step label or git's words, and a reproduce line the step's name: an escape or a bidi
    override in them reaches the terminal as text."""
    import types

    from rocmci.runs import bisectrun as br
    from rocmci.runs import service

    c = ["a" * 40, "b" * 40]
    tried = [br.Tried(c[0], "r:a", None, [], bs.SKIP, 1.0, "", "no step 'X\x1b[2J' at this commit")]
    answer = bs.Answer(c[1], None, (c[1],), (c[0],))
    flags = types.SimpleNamespace(step="Kernels\u202e MoE", json=False)
    assert service._bisect_report(flags, answer, tried, {c[1]: "r:b"}, "g" * 40, c[1], "l.jsonl") == 0
    out = capsys.readouterr().out
    assert "no step 'X\\e[2J' at this commit" in out and "Kernels\\u202e MoE" in out
    assert "\x1b" not in out and "\u202e" not in out
