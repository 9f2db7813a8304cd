"""Line numbers in a Dockerfile are BuildKit's: only "\\n" ends a line.

Python's str.splitlines also breaks at a form feed, U+0085, U+2028, a lone "\\r" and a few more. A
Dockerfile holding one of them in a comment put every finding after it on the wrong line (and read the
column from the wrong text), while BuildKit's parser, which numbers the instructions, did not move.
"""

from __future__ import annotations

import shutil

import pytest

from rocmci import fixes
from rocmci.image import check as checkmod
from rocmci.image import vllm_dockerfile as vd

# Each is a line break to str.splitlines and plain text to BuildKit's line scanner.
NOT_LINE_BREAKS = ["\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u2029", "\r"]


@pytest.mark.parametrize("char", NOT_LINE_BREAKS, ids=[f"U+{ord(c):04X}" for c in NOT_LINE_BREAKS])
def test_arch_finding_keeps_buildkits_line_and_column_after_a_comment_holding_it(vllm_fixtures, tmp_path, char):
    def finding_in(tree):
        shutil.copytree(vllm_fixtures / "docker", tree / "docker")
        (tree / "setup.py").write_text("# stand-in\n")
        return tree

    plain = finding_in(tmp_path / "plain")
    odd = finding_in(tmp_path / "odd")
    dockerfile = odd / "docker" / "Dockerfile.rocm"
    text = dockerfile.read_text()
    first_comment = text.index("\n#") + 2
    dockerfile.write_text(text[:first_comment] + f" a{char}b" + text[first_comment:])
    request = checkmod.ArchRequest(
        ("gfx942",), "--arch", ("gfx90a", "gfx942", "gfx950"), "bake", ("docker/docker-bake-rocm.hcl", 23)
    )
    expected = [(f.line, f.col, f.rule) for f in checkmod.check(vd.load(plain), request)]
    assert expected and expected[0][2] == "deepep-arch-source"
    assert [(f.line, f.col, f.rule) for f in checkmod.check(vd.load(odd), request)] == expected


@pytest.mark.parametrize("char", NOT_LINE_BREAKS, ids=[f"U+{ord(c):04X}" for c in NOT_LINE_BREAKS])
def test_the_line_that_applies_a_fix_is_buildkits(char):
    text = f"FROM base\n# see{char}notes\nRUN git apply fix.patch && echo rocm-libraries#1234\nRUN build.sh\n"
    assert fixes.dockerfile_names_fix(text, "ROCm/rocm-libraries#1234") == 3


def test_a_syntax_directive_after_a_crlf_line_is_still_read():
    """Windows line ends are one break each, as BuildKit reads them (the "\\r" is dropped, not a second line)."""
    from rocmci.image.features import uses

    df = vd.parse("# syntax=docker/dockerfile:1.7\r\nFROM base\r\nRUN true\r\n", path=None, display="Dockerfile")
    assert [(u.feature, u.line) for u in uses(df)] == [("# syntax=docker/dockerfile:1.7", 1)]
    assert df.lines == ["# syntax=docker/dockerfile:1.7", "FROM base", "RUN true"]


@pytest.mark.parametrize("char", NOT_LINE_BREAKS, ids=[f"U+{ord(c):04X}" for c in NOT_LINE_BREAKS])
def test_every_instruction_sits_on_the_line_buildkits_parser_gives_it(vllm_fixtures, char):
    """Differential, against BuildKit's own parser (the `dockerfile` package) on vLLM's real Dockerfile.rocm with
    the odd character put into every comment line: each instruction's first line is where BuildKit says."""
    import dockerfile

    text = (vllm_fixtures / "docker" / "Dockerfile.rocm").read_text()
    odd = "".join(line + (f" {char}x" if line.startswith("#") else "") + "\n" for line in text.split("\n")[:-1])
    lines = fixes.dockerfile_lines(odd)
    instructions = dockerfile.parse_string(odd)
    assert len(instructions) > 50
    for ins in instructions:
        assert lines[ins.start_line - 1].lstrip().upper().startswith(ins.cmd.upper()), (ins.start_line, ins.cmd)
