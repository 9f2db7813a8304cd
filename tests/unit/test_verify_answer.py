"""The verifier's answer is read one way by retarget's check and by the run preflight's code-object probe."""

from __future__ import annotations

import pytest

from rocmci import verify
from rocmci.errors import BuildError
from rocmci.image.retarget import check_verification
from rocmci.runs.images import parse_probe

GOOD = 'noise\n{"old": 1}\n{"ok": true, "found": ["gfx942", "gfx90a"], "libraries": ["a.so"]}\ntrailer\n'


@pytest.mark.parametrize("stdout", ["", "no json\n", "{not json\n", '{"ok": true}\n{broken\n', "{}\n[1]\n"])
def test_no_answer_is_the_same_for_both_callers(stdout):
    expected = {} if stdout == "{}\n[1]\n" else None  # a line not starting with '{' is never the answer
    assert verify.answer(stdout) == expected
    if expected is None:
        assert parse_probe(stdout) == (None, "the code-object probe gave no answer")
        with pytest.raises(BuildError, match="gave no result"):
            check_verification(stdout, 1, "t:x")


def test_the_last_json_object_line_is_the_answer():
    assert verify.answer(GOOD) == {"ok": True, "found": ["gfx942", "gfx90a"], "libraries": ["a.so"]}
    assert parse_probe(GOOD) == ("gfx90a;gfx942", "code objects of 1 DeepEP libraries")
    assert check_verification(GOOD, 0, "t:x")["ok"] is True
