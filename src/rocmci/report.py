"""Rendering for people (tables and findings, with `rich`) and machines (JSON). No decisions are made here.

Two ways to look, chosen by where the output goes (`terminal_mode`):
- a person at a terminal: layouts fit the terminal's width and wrap between words, findings are grouped
  under their file (the path is shown once), colour unless NO_COLOR or TERM=dumb;
- anything else (a pipe, a file, CI logs): plain lines, never wrapped, never coloured; findings in the
  compiler format `file:line:col: severity [rule] message` that editors and log matchers understand.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from io import StringIO
from typing import IO, Any, NamedTuple

from rocmci.errors import UsageError
from rocmci.values import parse_int

GAP = 2  # spaces between table columns
INDENT = 2  # findings under their file, fields of a stacked record
# A field printed for people is cut here: a 1 MB label in a step file must not make a 1 MB line.
MAX_FIELD = 1000


# ------------------------------------------------------------------------------- terminal safety

# C0 controls but tab and newline, DEL, and C1 controls (U+0080..U+009F: some terminals act on them as ESC [);
# then what reorders or hides text without being a control character: the bidi embeddings, overrides and
# isolates (U+202A..U+202E, U+2066..U+2069: a U+202E makes `txt.exe` read as `exe.txt`), the directional
# marks (U+200E, U+200F, U+061C), zero-width characters (U+200B..U+200D, U+2060, U+FEFF), and the line and
# paragraph separators (U+2028, U+2029, U+0085 is C1), which split one record over several lines.
INVISIBLE = "\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\u2028\u2029"
_CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{INVISIBLE}]")
_CONTROL_OR_NEWLINE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f{INVISIBLE}]")
UNSAFE_ON_ONE_LINE = _CONTROL_OR_NEWLINE  # what no printed record may hold raw (dry-run comments use it too)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def _escape_one(match: re.Match) -> str:
    c = match.group()
    return _NAMED.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")


def redact_shapes(text: str) -> str:
    """Every credential shape in `text` (a token, a private key, a URL's userinfo) as ***: secrets.Redactor
    without an environment, so without any cost of its own where the text holds no anchor of a shape."""
    global _SHAPES_ONLY
    if _SHAPES_ONLY is None:
        from rocmci.secrets import Redactor

        _SHAPES_ONLY = Redactor()
    return _SHAPES_ONLY(text)


_SHAPES_ONLY = None


def safe(text: Any, *, limit: int | None = MAX_FIELD, one_line: bool = True) -> str:
    """`text` as it may be printed: the output gate for people. Credential shapes masked (redact_shapes: a
    token in an image label, a URL's userinfo in a setting), control characters shown as escapes (ESC as
    \\e, NUL as \\x00), never
    sent to the terminal (a file or an image label could clear the screen or retitle the window); cut to
    `limit` characters, saying how much was left out. `one_line` escapes newlines and tabs too."""
    text = redact_shapes(str(text))  # before the cut: a cut token would no longer look like one
    cut = ""
    if limit is not None and len(text) > limit:
        cut = f"... ({len(text) - limit} more characters)"
        text = text[:limit]
    pattern = _CONTROL_OR_NEWLINE if one_line else _CONTROL
    return pattern.sub(_escape_one, text) + cut


class Mode(NamedTuple):
    interactive: bool  # a person at a terminal: fit the width, group, wrap between words
    colour: bool
    width: int | None  # columns of the terminal; None when the output is not one


def terminal_mode(stream: IO[str] | None = None, env: Mapping[str, str] | None = None) -> Mode:
    """Decide layout and colour from the stream and the conventional variables.

    CI logs are read later, in a browser, at any width: plain lines there even when the CI agent runs
    commands in a pseudo-terminal (Buildkite does). NO_COLOR (no-color.org) and TERM=dumb keep the
    terminal layout and drop the colour.
    """
    stream = sys.stdout if stream is None else stream
    env = os.environ if env is None else env
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real file
        tty = False
    in_ci = env.get("CI", "").lower() not in ("", "0", "false")
    interactive = tty and not in_ci
    if not interactive:
        return Mode(False, False, None)
    colour = "NO_COLOR" not in env and env.get("TERM", "") != "dumb"
    return Mode(True, colour, _terminal_width(stream, env))


def _terminal_width(stream: IO[str], env: Mapping[str, str]) -> int:
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        width = 0
    if width <= 0:  # a pseudo-terminal nobody sized (pre-commit's, for one): COLUMNS, else 80
        columns = env.get("COLUMNS", "")
        try:  # values.parse_int: '²'.isdigit() is true but int('²') fails; 5,000 digits exceed int()'s limit
            width = parse_int(columns, "COLUMNS", low=1)
        except UsageError:
            width = 80
    return width


class PlainOut:
    """What `console()` gives a pipe, a file or CI: one plain line per print, and no rich import.

    Importing rich costs a noticeable share of a validation run's start-up, and plain output needs none of it.
    """

    is_terminal = False

    def __init__(self, stream: IO[str]) -> None:
        self.file = stream

    def print(self, obj: Any = "", **_: Any) -> None:
        print(safe(obj, limit=None, one_line=False), file=self.file)


def console(stream: IO[str] | None = None, mode: Mode | None = None, *, rich_always: bool = False):
    """A rich Console for `stream` that follows `terminal_mode` (markup off: messages are data).

    Where the output is not interactive the result is a `PlainOut` unless `rich_always` (for renderables).
    """
    stream = sys.stdout if stream is None else stream
    mode = terminal_mode(stream) if mode is None else mode
    if not mode.interactive and not rich_always:
        return PlainOut(stream)
    from rich.console import Console

    return Console(
        file=stream,
        width=mode.width or 10_000,
        force_terminal=mode.interactive,
        color_system="auto" if mode.colour else None,
        no_color=not mode.colour,
        markup=False,
        emoji=False,
        highlight=False,
        soft_wrap=not mode.interactive,
    )


def plural(count: int, noun: str) -> str:
    """'1 error', '2 errors', '1 generated step': `noun` is singular."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _singular(noun_phrase: str) -> str:
    return noun_phrase[:-1] if noun_phrase.endswith("s") else noun_phrase


# ---------------------------------------------------------------------------------------------- tables


def _words(text: str) -> list[str]:
    return text.split() or [""]


def column_widths(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[int] | None:
    """Widths that fit `width` without breaking a word, or None when no such widths exist.

    Columns that are narrow anyway keep their natural width; the widest are cut down to a common cap,
    never below their longest word. Pure, so the layout is tested without a terminal.
    """
    cells = [list(headers), *[list(r) for r in rows]]
    natural = [max(len(line) for row in cells for line in row[i].splitlines() or [""]) for i in range(len(headers))]
    least = [max(len(w) for row in cells for w in _words(row[i])) for i in range(len(headers))]
    room = width - GAP * (len(headers) - 1)
    if sum(natural) <= room:
        return natural
    if sum(least) > room:
        return None

    def capped(cap: int) -> list[int]:
        return [max(m, min(n, cap)) for n, m in zip(natural, least, strict=True)]

    cap = max(natural)
    while sum(capped(cap)) > room:
        cap -= 1
    widths = capped(cap)
    # Columns at the cap that want more share what the cap left over, one column each.
    for i in [i for i in range(len(widths)) if natural[i] > widths[i]][: room - sum(widths)]:
        widths[i] += 1
    return widths


def _plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cells = [list(headers), *[list(r) for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _styled(text: str, styles: Mapping[str, str] | None):
    from rich.text import Text

    return Text(text, style=(styles or {}).get(text, ""))


def _rich_table(headers, rows, widths: list[int], styles):
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, GAP, 0, 0), pad_edge=False)
    for w in widths:
        grid.add_column(width=w, overflow="fold")
    grid.add_row(*(Text(h, style="bold") for h in headers))
    grid.add_row(*(Text("─" * w, style="dim") for w in widths))
    for row in rows:
        grid.add_row(*(_styled(c, styles) for c in row))
    return grid


def _stacked(headers, rows, styles):
    """One record per row: the first cell as a heading, the others indented under it, named by header."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    parts = []
    label_width = max(len(h) for h in headers[1:])
    for row in rows:
        parts.append(Text(row[0], style="bold"))
        fields = Table.grid(padding=(0, GAP, 0, 0))
        fields.add_column(width=label_width, no_wrap=True, style="dim")
        fields.add_column(overflow="fold")
        for header, cell in zip(headers[1:], row[1:], strict=True):
            fields.add_row(header, _styled(cell, styles))
        parts.append(Padding(fields, (0, 0, 0, INDENT)))
    return Group(*parts)


def _folded_fits(headers, rows, width: int) -> bool:
    first = max(len(r[0]) for r in [headers, *rows])
    label = max(len(h) for h in headers[2:])
    second = max(len(w) for r in rows for w in _words(r[1]))
    rest = label + GAP + max(len(w) for r in rows for c in r[2:] for w in _words(c))
    return first + GAP + max(second, rest, len(headers[1])) <= width


def _folded(headers, rows, styles):
    """Two columns; the third and later columns go under the second, named by their header, dimmed."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, GAP, 0, 0))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(Text(headers[0], style="bold"), Text(headers[1], style="bold"))
    label_width = max(len(h) for h in headers[2:])
    for row in rows:
        rest = Table.grid(padding=(0, GAP, 0, 0))
        rest.add_column(width=label_width, no_wrap=True, style="dim")
        rest.add_column(overflow="fold", style="dim")
        for header, cell in zip(headers[2:], row[2:], strict=True):
            rest.add_row(header, _styled(cell, styles))
        grid.add_row(row[0], Group(_styled(row[1], styles), rest))
    return grid


def table_renderable(headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int, styles=None):
    """A rich renderable for a terminal `width` columns wide that never breaks a word it can keep whole.

    The table itself when its words fit; else the first two columns with the others folded under the
    second; else one record per row.
    """
    headers = [str(h) for h in headers]
    text_rows = [[str(c) for c in row] for row in rows]
    widths = column_widths(headers, text_rows, width)
    if widths is not None or len(headers) == 1:
        return _rich_table(headers, text_rows, widths or [width], styles)
    if len(headers) > 2 and text_rows and _folded_fits(headers, text_rows, width):
        return _folded(headers, text_rows, styles)
    return _stacked(headers, text_rows, styles)


def _render(renderable, mode: Mode) -> str:
    buffer = StringIO()
    out = console(buffer, mode, rich_always=True)
    out.print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines())


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    styles: Mapping[str, str] | None = None,
    stream: IO[str] | None = None,
) -> str:
    """A table as text for `stream` (default stdout): fitted and coloured on a terminal, plain otherwise.

    `styles` maps a cell's exact text to a rich style (e.g. {"ok": "green"}); used only in colour.
    """
    mode = terminal_mode(stream)
    headers = [safe(h) for h in headers]
    rows = [[safe(c, one_line=False) for c in row] for row in rows]
    if not mode.interactive:
        return _plain_table(headers, rows)
    return _render(table_renderable(headers, rows, mode.width or 80, styles), mode)


def lines(texts: Sequence[str], *, stream: IO[str] | None = None) -> str:
    """Sentences for `stream`: on a terminal each wraps between words, continued under its own text."""
    mode = terminal_mode(stream)
    texts = [safe(t, limit=None, one_line=False) for t in texts]
    if not mode.interactive:
        return "\n".join(texts)
    from rich.console import Group
    from rich.text import Text

    return _render(Group(*(Text(t) for t in texts)), mode)


def columns(rows: Sequence[Sequence[Any]], *, indent: int = 0, stream: IO[str] | None = None) -> str:
    """Rows of cells without a header (help's `--flag VALUE  what it does`): aligned, and on a terminal
    fitted to its width, the last column wrapped between words under itself."""
    mode = terminal_mode(stream)
    text_rows = [[safe(c) for c in row] for row in rows]
    if not text_rows:
        return ""
    pad = " " * indent
    if not mode.interactive:
        widths = [max(len(r[i]) for r in text_rows) for i in range(len(text_rows[0]) - 1)]
        return "\n".join(
            (pad + "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]])).rstrip()
            for r in text_rows
        )
    from rich.padding import Padding
    from rich.table import Table

    grid = Table.grid(padding=(0, GAP, 0, 0), pad_edge=False)
    for _ in text_rows[0][:-1]:
        grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    for row in text_rows:
        grid.add_row(*row)
    return _render(Padding(grid, (0, 0, 0, indent)), mode)


def records(items: Sequence[tuple[str, Sequence[tuple[str, str]]]], *, stream: IO[str] | None = None,
            styles: Mapping[str, str] | None = None) -> str:  # fmt: skip
    """Records for people: a heading, then `label: text` fields under it (the workaround registry's layout).

    Plain: `heading` then `    label: text` per field. On a terminal the heading is bold, labels dimmed
    and aligned, and each text wraps between words under itself. `styles` colours a heading's words.
    """
    mode = terminal_mode(stream)
    clean = [(safe(h), [(safe(label), safe(text)) for label, text in fields]) for h, fields in items]
    if not mode.interactive:
        return "\n".join(
            "\n".join([h, *(f"    {label}: {text}" for label, text in fields)]) for h, fields in clean
        )
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    parts = []
    for heading, fields in clean:
        title = Text(heading, style="bold")
        for word, style in (styles or {}).items():
            title.highlight_words([word], style=style)
        parts.append(title)
        if fields:
            grid = Table.grid(padding=(0, GAP, 0, 0))
            grid.add_column(no_wrap=True, style="dim")
            grid.add_column(overflow="fold")
            for label, text in fields:
                grid.add_row(label, text)
            parts.append(Padding(grid, (0, 0, 0, INDENT)))
    return _render(Group(*parts), mode)


def redact_environ(text: str) -> str:
    """`text` through the redactor of this process's environment: the values of its secret-named and
    secret-looking variables, and every credential shape (a token, a URL's userinfo) in the text itself."""
    from rocmci.secrets import Redactor

    return Redactor(os.environ)(str(text))


def gated(line: str) -> str:
    """One line of text from outside (a label, a path, a setting's value) as it may reach stderr: through the
    redactor of this process's environment, escaped and bounded."""
    return safe(redact_environ(line), limit=4 * MAX_FIELD)


def error_line(text: str, *, stream: IO[str] | None = None) -> str:
    """A `rocmci: ...` message for stderr: redacted (a refusal quotes what it refuses, and a CI log is
    public), escaped and bounded; on a terminal wrapped between words, with the continuation under the
    message and `rocmci:` in red."""
    stream = sys.stderr if stream is None else stream
    mode = terminal_mode(stream)
    text = gated(text)
    if not mode.interactive:
        return text
    from rich.table import Table
    from rich.text import Text

    head, sep, rest = text.partition(": ")
    if not sep or " " in head:
        head, rest = "", text
    grid = Table.grid(padding=(0, 1, 0, 0), pad_edge=False)
    if head:
        grid.add_column(no_wrap=True, style="bold red")
    grid.add_column(overflow="fold")
    grid.add_row(*([Text(head + ":")] if head else []), Text(rest))
    return _render(grid, mode)


# ----------------------------------------------------------------------------------------------- other


def to_json(data: Any) -> str:
    """JSON for machines, through the same redactor as text for people (a token in an image label or a
    setting is *** in --json too); *** needs no JSON escaping, so the document stays valid."""
    return redact_shapes(json.dumps(data, indent=2, sort_keys=True))


# A word of a printed command is cut here (a 1 MB step label must not make a 1 MB dry-run line); the cut
# is said in the word itself, so a pasted command fails on it rather than running something else.
MAX_WORD = 4 * MAX_FIELD
_ANSI_C = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\E"}


def shell_word(word: str) -> str:
    """One word of a printed command, quoted for a POSIX shell, and safe for the terminal: a word holding a
    control, bidi or line-separating character is written in bash's $'...' form with those characters as
    escapes (\\n, \\E, \\u202e), so it stays on its line, reads in its order and still pastes exactly; a
    word over MAX_WORD characters is cut, saying how much was left out."""
    cut = ""
    if len(word) > MAX_WORD:
        cut = f"...({len(word) - MAX_WORD} more characters)"
        word = word[:MAX_WORD]
    if not _CONTROL_OR_NEWLINE.search(word):
        return shlex.quote(word + cut)

    def one(c: str) -> str:
        if c in _ANSI_C:
            return _ANSI_C[c]
        if _CONTROL_OR_NEWLINE.fullmatch(c):
            return f"\\x{ord(c):02x}" if ord(c) < 0x80 else f"\\u{ord(c):04x}"
        return c

    return "$'" + "".join(map(one, word + cut)) + "'"


def shell_lines(argv: list[str]) -> str:
    """An exact command, shell-quoted, a flag and its value per line: readable and copy-pastable (see
    shell_word: escaped for the terminal, each word bounded)."""
    lines: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i].startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            lines.append(f"{shell_word(argv[i])} {shell_word(argv[i + 1])}")
            i += 2
        else:
            lines.append(shell_word(argv[i]))
            i += 1
    return " \\\n    ".join(lines)
