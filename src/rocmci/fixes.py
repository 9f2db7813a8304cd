"""Which upstream fixes a Dockerfile applies: read from its instructions, never from its comments.

A leaf (imports nothing of rocmci): the workaround registry reads a checkout's Dockerfile.rocm_base
with it (`vllm_dockerfile_applies`), and image builds record what it finds as the `rocmci.rocm.fixes`
label, so the two can never disagree about what counts as applying a fix.

Work is linear in the text: plain substring search, no regular expression over file text.
"""

from __future__ import annotations


def names_fix(line: str, fix: str) -> bool:
    """Whether `line` names `fix` (owner/repo#N) as repo#N or its pull/issue URL; #69420 is not #6942."""
    owner_repo, _, number = fix.partition("#")
    repo = owner_repo.split("/", 1)[1].lower()
    text = line.lower()
    for needle in (f"{repo}#{number}", f"{repo}/pull/{number}", f"{repo}/issues/{number}"):
        start = text.find(needle)
        while start != -1:
            end = start + len(needle)
            if end == len(text) or not text[end].isdigit():
                return True
            start = text.find(needle, end)
    return False


def dockerfile_lines(text: str) -> list[str]:
    """A Dockerfile's lines as BuildKit numbers them: only a line feed ends a line (a "\\r" before it is
    dropped). str.splitlines also breaks at a form feed, U+0085, U+2028 and more, which BuildKit reads as
    text: with one of them in a comment, every line after it would be counted one too far."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


class Instructions:
    """A Dockerfile's instruction text, read once: each `first_naming(fix)` is a few C-speed substring searches
    over it, so a registry of N entries costs N searches, not N passes of Python over every line."""

    def __init__(self, text: str) -> None:
        from bisect import bisect_right

        self._bisect = bisect_right
        kept: list[str] = []
        self._numbers: list[int] = []
        self._starts: list[int] = []
        offset = 0
        for number, raw in enumerate(dockerfile_lines(text), 1):
            line = raw.lstrip()
            if not line or line.startswith("#"):
                continue
            for marker in (" #", "\t#"):  # a shell comment inside RUN: text the shell never runs
                cut = line.find(marker)
                if cut != -1:
                    line = line[:cut]
            line = line.lower()
            self._numbers.append(number)
            self._starts.append(offset)
            kept.append(line)
            offset += len(line) + 1
        self._text = "\n".join(kept)  # a needle holds no line feed: no match spans two lines

    def first_naming(self, fix: str) -> int | None:
        """The line of the first instruction that names `fix`, as names_fix reads one line."""
        owner_repo, _, number = fix.partition("#")
        repo = owner_repo.split("/", 1)[1].lower()
        text, first = self._text, None
        for needle in (f"{repo}#{number}", f"{repo}/pull/{number}", f"{repo}/issues/{number}"):
            start = text.find(needle)
            while start != -1:
                end = start + len(needle)
                if end == len(text) or not text[end].isdigit():
                    first = start if first is None else min(first, start)
                    break
                start = text.find(needle, end)
        return None if first is None else self._numbers[self._bisect(self._starts, first) - 1]


def dockerfile_names_fix(text: str, fix: str) -> int | None:
    """The line of the first instruction that names `fix`; comment lines and shell comments do not count."""
    return Instructions(text).first_naming(fix)


def applied(text: str, fixes: tuple[str, ...]) -> tuple[str, ...]:
    """The fixes among `fixes` that an instruction of the Dockerfile `text` applies, in the order given."""
    instructions = Instructions(text)
    return tuple(fix for fix in dict.fromkeys(fixes) if instructions.first_naming(fix) is not None)
