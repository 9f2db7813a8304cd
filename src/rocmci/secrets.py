"""Telling secrets apart, and keeping their values out of everything rocmci prints or writes.

Two signals: a variable's name (HF_TOKEN, GH_PAT, NPM_AUTH, PRIVATE_KEY_PEM, ...) and a value's
shape (a bearer token, an `hf_...` or `ghp_...` token, an AWS key id, a private-key block, a long
random-looking string). The pipeline rule `secret-in-pipeline` uses both on the env of every
step; `Redactor` uses both, plus every value the user passed by hand, on every line rocmci shows.

API for callers (runs, dry runs, logs):
    is_secret(name)                 the name looks like it holds a secret
    secret_kind(value)              what the value looks like ("a GitHub token", ...), or None
    Redactor(environ, given=..., public=...)
        environ: the process environment; values of secret-named or secret-looking variables
        given:   variables the user passed explicitly (e.g. every --env NAME=value): all redacted; a
                 short one under a plain name and of no secret shape only as a whole word
        public:  names the user declared public (a flag such as --public NAME): never redacted
        redact(text) / redact(text) also masks any secret-shaped token in free text (--extra).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Collection, Iterable, Mapping

# Words that mark a secret, as whole parts of a NAME_LIKE_THIS (so PATH, AUTHOR and MONKEY are not).
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|COOKIE"
    r"|(?:^|_)(?:KEY|PAT|AUTH|PEM|PASS|APIKEY|KEY_ID)$|_PWD$|(?:^|_)AUTH_|^API_?KEY",
    re.I,
)
MIN_LENGTH = 4  # shorter values would mask unrelated text and reveal little
MIN_SUBSTRING = 8  # a shorter non-secret --env value is masked only as a whole word (see Redactor)

# Shapes of credentials; each match is a secret wherever it appears in a value or a line of output.
# Beside each shape, an anchor: a pattern that every match of the shape contains, so that one cheap search
# of all anchors rules out the many values (long test commands included) that could match no shape. Each
# anchor starts at its rarest character ('_', '-', ':', 'A', 'B') and looks behind for the rest: the regex
# engine then tries the alternation only where one of those five characters stands, where a prefix such
# as 'hf_' made it try at every 'h', 'a', 'g', 'n', 's' and 'x' of the text (measured: about 40% less
# time on vLLM's step file and its generated pipeline). The shapes are compiled on first use: most
# processes never meet an anchor. tests/unit/test_secrets.py checks that every shape's matches hold
# its anchor.
_SHAPES: tuple[tuple[str, str, str], ...] = (
    ("a private key", "BEGIN ", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"),
    # HTTP authorization values as written in headers (case-sensitive: "basic tests/..." is no header).
    (
        "a bearer token",
        "Bearer|Basic",
        r"\bBearer\s+[A-Za-z0-9\-._~+/]{16,}=*|\bBasic\s+[A-Za-z0-9+/]{16,}={0,2}(?![\w./-])",
    ),
    ("a Hugging Face token", "_(?<=hf_)|_(?<=api_org_)", r"\b(?:hf|api_org)_[A-Za-z0-9]{30,}\b"),
    (
        "a GitHub token",
        "_(?<=gh[pousr]_)|_(?<=github_pat_)",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b",
    ),
    ("an AWS access key id", "A(?:KIA|SIA|GPA|IDA|ROA|NPA)", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}\b"),
    ("a Slack token", "-(?<=xox[abposr]-)", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("an npm token", "_(?<=npm_)", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("a GitLab token", "-(?<=glpat-)", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("an API key", "-(?<=sk-)", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{32,}"),
    # Only the user:password part, found right after '://': the scheme is not matched at all, because
    # `\b[a-z][a-z0-9+.-]*://` restarted at every letter of 'a.a.a...' and scanned to the end each time
    # (quadratic: 10^6 characters took hours). Masked, a URL keeps its shape: https://***@host/repo.
    ("a password in a URL", "://", r"(?<=://)[^/\s:@$]+:[^/\s@$]{3,}(?=@)"),
    # Over http(s) any userinfo is a credential (https://TOKEN@github.com/...: git sends it as the password);
    # ssh's user name (ssh://git@host) is none and stays. A `$NAME` there is a reference, not a value.
    ("a token in a URL", "://", r"(?:(?<=http://)|(?<=https://))[^/\s:@$]{4,}(?=@)"),
)
_ANCHORS = re.compile("|".join(anchor for _, anchor, _ in _SHAPES))


@functools.cache
def _compiled_shapes() -> tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...]:
    """(kind, anchor, shape) compiled. Each anchor on its own: a text that holds some anchor is then searched
    for the shapes whose anchor it holds (a URL's '://' for the URL password only), each search skipping
    ahead to its own rare character. (One pattern with a group per anchor would say which anchors matched
    in one pass, but capturing groups stop the engine from skipping: 13 times slower on vLLM's step file.)"""
    return tuple((kind, re.compile(anchor), re.compile(shape)) for kind, anchor, shape in _SHAPES)


def _shapes_in(text: str) -> list[tuple[str, re.Pattern[str]]]:
    """(kind, shape) of each shape whose anchor is in `text`, in _SHAPES' order; usually none."""
    if not _ANCHORS.search(text):
        return []
    return [(kind, shape) for kind, anchor, shape in _compiled_shapes() if anchor.search(text)]


_TOKEN = re.compile(r"[A-Za-z0-9+/_=-]{32,}")
# In free text `NAME=value` must split at the `=` (only base64 padding may end a token), or a variable
# name glued to a commit hash would look random.
_TEXT_TOKEN = re.compile(r"[A-Za-z0-9+/_-]{32,}={0,2}")
MIN_ENTROPY = 4.0  # bits per character; English words and paths sit well below, random base62 near 5.7


@functools.lru_cache(maxsize=4096)  # the same few names recur in every step
def is_secret(name: str) -> bool:
    """The variable's name says it holds a secret."""
    return bool(SECRET_NAME.search(name))


def entropy(text: str) -> float:
    """Shannon entropy in bits per character."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def _random_looking(token: str) -> bool:
    """A long token mixing upper case, lower case and digits with high entropy, like a generated key.

    Words, paths and model names (deepseek-ai/DeepSeek-V2-Lite-Chat) have few digits and repeat
    letters; commit hashes are hex only and have no upper case.
    """
    if len(token) < 32:
        return False
    uppers = sum(map(str.isupper, token))  # map: counted in C, not one generator step per character
    lowers = sum(map(str.islower, token))
    digits = sum(map(str.isdigit, token))
    if uppers < 3 or lowers < 3 or digits < 3:
        return False
    return entropy(token) >= MIN_ENTROPY


@functools.lru_cache(maxsize=4096)  # a pipeline repeats the same env values in hundreds of steps
def secret_kind(value: str, *, whole: bool = True) -> str | None:
    """What `value` looks like if it looks like a credential, else None.

    `whole` also tests the value as one random-looking token (an env value); a long command line is
    tested only for the credential shapes, since it is full of long ordinary words.
    """
    for kind, shape in _shapes_in(value):
        if shape.search(value):
            return kind
    stripped = value.strip()
    if whole and _TOKEN.fullmatch(stripped) and _random_looking(stripped):
        return "a long random-looking string"
    return None


def _mask_shapes(text: str) -> str:
    for _, shape in _shapes_in(text):  # masking one shape cannot make another's anchor appear
        text = shape.sub("***", text)
    return _TEXT_TOKEN.sub(lambda m: "***" if _random_looking(m.group()) else m.group(), text)


def _pieces(values: Iterable[str]) -> set[str]:
    """What of each value to look for: the value, each of its lines, and how pytest shows it in a test id or
    a message (non-ASCII escaped, not as typed). Pieces shorter than MIN_LENGTH are kept: they would mask
    unrelated text ("1", "on") and reveal too little to matter."""
    pieces: set[str] = set()
    for value in values:
        pieces.add(value.strip())
        pieces.update(line.strip() for line in value.splitlines())
        pieces.add(value.strip().encode("unicode_escape").decode("ascii"))
    return {p for p in pieces if len(p) >= MIN_LENGTH}


class Redactor:
    """Replaces secret values with *** in any text before it is printed or written.

    Redacted: values of `environ` variables whose name or value looks secret, every value in
    `given` (what the user typed on the command line: they may be secrets under any name), every
    line of a multi-line value, and any secret-shaped token in the text itself. Names in `public`
    are never redacted. Values shorter than MIN_LENGTH are kept: they would mask unrelated text. A given
    value under a plain name and of no secret shape, shorter than MIN_SUBSTRING, is masked only as a
    whole word, so that `--env MODE=pass` leaves "4 passed" alone.
    """

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        given: Mapping[str, str] | None = None,
        public: Collection[str] = (),
        values: Iterable[str] = (),
    ) -> None:
        # Two strengths. A secret (a secret name, a credential shape, or a value handed in as `values`) is
        # masked wherever it appears, inside other words too. A given value that is neither (--env MODE=pass)
        # may still be a secret under a plain name, so it never shows as a word of its own, but inside
        # another word ("passed", "localhost") it is masked only from MIN_SUBSTRING characters on: a
        # shorter one is an ordinary word far more often than a secret, and masking it there would garble
        # output ("4 ***ed") without hiding anything.
        strong: set[str] = set(values)
        weak: set[str] = set()
        for name, value in (environ or {}).items():
            if name not in public and isinstance(value, str) and (is_secret(name) or secret_kind(value)):
                strong.add(value)
        for name, value in (given or {}).items():
            if name not in public and isinstance(value, str):
                (strong if is_secret(name) or secret_kind(value) else weak).add(value)
        strong_pieces = _pieces(strong)
        weak_pieces = _pieces(weak) - strong_pieces
        self.values = sorted(strong_pieces | weak_pieces, key=len, reverse=True)
        self._substrings = [v for v in self.values if v in strong_pieces or len(v) >= MIN_SUBSTRING]
        short = [re.escape(v) for v in self.values if v not in strong_pieces and len(v) < MIN_SUBSTRING]
        self._words = re.compile(rf"(?<![A-Za-z0-9_])(?:{'|'.join(short)})(?![A-Za-z0-9_])") if short else None

    def __call__(self, text: str) -> str:
        for value in self._substrings:
            text = text.replace(value, "***")
        if self._words is not None:
            text = self._words.sub("***", text)
        return _mask_shapes(text)
