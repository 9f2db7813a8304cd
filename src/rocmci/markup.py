"""Text from outside (step labels, test ids, findings, paths) as it may go into Markdown that Buildkite renders.

The one escaper for annotations (`annotation.md`, `buildkite-agent annotate`, the --keep-going annotation):
every caller passes outside text through one of these three, and writes only its own Markdown around it.

    inline(text)   prose or a table cell: no HTML (`<script>`, `<img>`, `</details>` become text), no link or
                   image (`[x](url)`, `![x](url)`), no code span, no table cell break; one line
    code(text)     an inline code span no backtick in `text` can close
    block(lines)   a fenced code block no line of `lines` can close

Before the Markdown escaping, text goes through the terminal escaper (report.safe): control characters,
bidi overrides (U+202E) and line separators are shown as escapes, since a browser reorders text on a bidi
override just as a terminal does; and each piece is bounded (report.MAX_FIELD).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# One pass (str.translate), so no escape is escaped again. `<`, `>` and `&` as entities: no HTML tag,
# comment or autolink can open, and an entity in the text stays text. `[` and `]`: no link, image or
# reference. A backtick: no code span. `|`: no new table cell.
_INLINE = str.maketrans({"\\": "\\\\", "&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "\\[", "]": "\\]",
                         "`": "\\`", "|": "\\|", "*": "\\*", "~": "\\~"})  # fmt: skip
# `*` and `~` above: no emphasis or strike-through. `_` only where it could open or close emphasis: between two
# letters or digits it cannot (CommonMark's flanking rules), so a test id such as test_a_b stays as it reads.
_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_BACKTICKS = re.compile(r"`+")


def _plain(text: object, limit: int | None) -> str:
    from rocmci.report import MAX_FIELD, safe

    # one line: whitespace runs (newlines too) become one space, then what is left is escaped and bounded
    return safe(" ".join(str(text).split()), limit=MAX_FIELD if limit is None else limit)


def inline(text: object, *, limit: int | None = None) -> str:
    """`text` as literal Markdown text on one line (see the module's docstring)."""
    return _UNDERSCORE.sub(r"\\_", _plain(text, limit).translate(_INLINE))


def _fence_for(text: str, least: int) -> str:
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    return "`" * max(least, longest + 1)


def code(text: object, *, limit: int | None = None) -> str:
    """`text` as an inline code span: delimited by more backticks than its longest run (CommonMark), padded with
    a space where it starts or ends with a backtick. `|` is escaped too: GFM splits a table cell even there."""
    body = _plain(text, limit).replace("|", "\\|") or " "  # `` is no code span; ` ` is one of a space
    fence = _fence_for(body, 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def block(lines: Iterable[object]) -> list[str]:
    """`lines` as a fenced code block (its lines, the fences included): the fence is longer than any run of
    backticks in the lines, so none of them closes it; each line is escaped for control characters."""
    from rocmci.report import MAX_FIELD, safe

    body = [safe(line, limit=4 * MAX_FIELD) for line in lines]
    fence = _fence_for("\n".join(body), 3)
    return [fence, *body, fence]
