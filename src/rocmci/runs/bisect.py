"""The search of `run.bisect`: pure, so the order of tries and the answer follow from the verdicts alone.

Candidates are the first-parent commits after --good up to --bad, oldest first; --good is known good and
--bad known bad (neither is run, as `git bisect` trusts them). Each try gives a verdict: good, bad, or
skip (no image, no such step at that commit, an outcome that decides nothing). A skipped midpoint gives
way to its nearest untried neighbour inside the interval, as `git bisect skip` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

GOOD, BAD, SKIP = "good", "bad", "skip"


def verdict(outcomes: Sequence[str], *, any_fails: bool = True) -> str:
    """The verdict of one commit's tries (--repeat N): bad if any failed (all of them with any_fails off),
    good only if every try passed, else skip. Only passed and failed decide."""
    passed = sum(o == "passed" for o in outcomes)
    failed = sum(o == "failed" for o in outcomes)
    if failed and (any_fails or failed == len(outcomes)):
        return BAD
    if outcomes and passed == len(outcomes):
        return GOOD
    return SKIP


@dataclass(frozen=True)
class Answer:
    first_bad: str | None  # None: the range holds no bad commit the tries could see (all skipped between)
    last_good: str | None  # None: --good itself
    suspects: tuple[str, ...]  # when skips hide the answer: the commits one of which is the first bad
    skipped: tuple[str, ...]

    @property
    def exact(self) -> bool:
        return len(self.suspects) <= 1


class Search:
    """Binary search over `commits` (oldest first; the last is --bad) given the verdicts so far."""

    def __init__(self, commits: Sequence[str], verdicts: Mapping[str, str]) -> None:
        self.commits = list(commits)
        self.verdicts = dict(verdicts)

    def interval(self) -> tuple[int, int]:
        """(lo, hi): commits[lo] is the newest known good (-1: --good), commits[hi] the oldest known bad after it."""
        lo, hi = -1, len(self.commits) - 1
        for i, commit in enumerate(self.commits[:-1]):
            if self.verdicts.get(commit) == GOOD:
                lo = i
        for i in range(len(self.commits) - 2, lo, -1):
            if self.verdicts.get(self.commits[i]) == BAD:
                hi = i
        return lo, hi

    def next(self) -> str | None:
        """The commit to try now, or None when the interval holds no untried commit."""
        lo, hi = self.interval()
        inside = list(range(lo + 1, hi))
        if not inside:
            return None
        mid = (lo + hi) // 2
        for i in sorted(inside, key=lambda i: (abs(i - mid), i)):
            if self.commits[i] not in self.verdicts:
                return self.commits[i]
        return None

    def answer(self) -> Answer:
        lo, hi = self.interval()
        between = self.commits[lo + 1 : hi]
        skipped = tuple(c for c in self.commits if self.verdicts.get(c) == SKIP)
        suspects = tuple([c for c in between if self.verdicts.get(c) == SKIP] + [self.commits[hi]])
        last_good = self.commits[lo] if lo >= 0 else None
        return Answer(self.commits[hi], last_good, suspects, skipped)
