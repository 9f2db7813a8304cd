"""Typed values from user text: one parser per kind, each failing with one line (UsageError, exit 2).

The faces (cli/flags.py) parse every flag once with these; core code that takes a value from a
setting (an image reference from ROCMCI_IMAGE, say) uses the same rule, so a value is checked the
same way wherever it comes from. No CLI library here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import NamedTuple

from rocmci.errors import UsageError

# An image reference as docker reads it: never an option (leading '-'), no whitespace, ';' or control
# characters. Digests (@sha256:...) and registry ports (host:5000/name) are allowed.
IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")
IMAGE_REF_HINT = "an image reference such as rocm/vllm-dev:base (letters, digits and . _ / : @ -)"
# What no one-line value that reaches a command line may hold: C0, DEL and C1 (U+0085 is a line break to YAML).
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Every number that comes from outside (flags, settings, env, step files, command text) is read by
# parse_int: ASCII digits only (int() also takes '١٠', '1_0' and ' 7 ', and str.isdigit() is true for
# '²', which int() refuses) and at most MAX_INT_DIGITS of them, far below Python's 4,300-digit limit,
# which otherwise turns a long number into a ValueError traceback. 18 digits hold any count, size or
# timeout rocmci uses and fit a signed 64-bit integer.
MAX_INT_DIGITS = 18
_INT = re.compile(r"[+-]?[0-9]+")


SHOWN = 60  # characters of a refused value that its one line quotes


def shown(text: str) -> str:
    """repr of outside text as a refusal quotes it: redacted first (secrets of this process's environment and
    every credential shape: a CI log publishes the line), then cut to SHOWN characters, so an error or finding
    line stays short whatever the input. Redacted before cutting: a cut token would no longer look like one."""
    import os

    from rocmci.secrets import Redactor

    text = str(text)
    r = repr(Redactor(os.environ)(text[: 64 * SHOWN]))  # a token starts within the SHOWN shown characters
    return r if len(r) <= SHOWN else r[: SHOWN - 3] + "..."


def shown_repr(value: object) -> str:
    """A non-text value (a TOML list or table) as a refusal quotes it: its repr, redacted and cut (see shown)."""
    import os

    from rocmci.secrets import Redactor

    r = Redactor(os.environ)(repr(value)[: 64 * SHOWN])
    return r if len(r) <= SHOWN else r[: SHOWN - 3] + "..."


_shown = shown


def parse_int(text: object, what: str, *, low: int | None = None, high: int | None = None) -> int:
    """A whole number from outside text; UsageError (one line naming `what`) for anything else.

    Takes an int (not a bool) or text of ASCII digits with an optional sign and surrounding blanks;
    refuses '2.9', '1e3', '0x10', '1_0', '١٠', '²' and more than MAX_INT_DIGITS digits, checking the
    length before converting so a 10**6-character value costs one scan.
    """
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise UsageError(f"{what} must be a whole number, got {_shown(repr(text))}")
    if isinstance(text, int):  # already a number (TOML, YAML): the same bound on its size
        number = text
        if not -(10**MAX_INT_DIGITS) < number < 10**MAX_INT_DIGITS:
            raise UsageError(f"{what} is a number of over {MAX_INT_DIGITS} digits")
    else:
        raw = text.strip()
        if not _INT.fullmatch(raw):
            raise UsageError(f"{what} must be a whole number, got {_shown(text)}")
        digits = len(raw.lstrip("+-"))
        if digits > MAX_INT_DIGITS:
            raise UsageError(f"{what} is a {digits}-digit number; numbers here have at most {MAX_INT_DIGITS} digits")
        number = int(raw)
    if low is not None and number < low or high is not None and number > high:
        lo = "" if low is None else f" at least {low}"
        hi = "" if high is None else f" at most {high}"
        bound = f"between {low} and {high}" if lo and hi else (lo or hi).strip()
        raise UsageError(f"{what} must be {bound}, got {number}")
    return number


def bounded_int(flag: str, text: str | int, low: int, high: int) -> int:
    """A whole number in [low, high] from a flag (see parse_int)."""
    return parse_int(text, flag, low=low, high=high)


def choice(flag: str, text: str, choices: Sequence[str]) -> str:
    if text in choices:
        return text
    import difflib  # only when a name is unknown: its import is a cost on every start
    close = difflib.get_close_matches(text, choices, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"choose one of: {', '.join(choices)}"
    raise UsageError(f"unknown {flag} {_shown(text)}", hint=hint)


def image_ref(flag: str, text: str) -> str:
    """An image reference that docker cannot read as an option or split (IMAGE_REF), in docker's grammar."""
    if not isinstance(text, str) or not IMAGE_REF.fullmatch(text):
        why = "starts with '-'" if isinstance(text, str) and text.startswith("-") else "is not an image reference"
        raise UsageError(f"{flag} {_shown(str(text))} {why}", hint=IMAGE_REF_HINT)
    problem = image_ref_problem(text)
    if problem:
        raise UsageError(f"{flag} {_shown(text)} {problem}", hint=IMAGE_REF_HINT)
    return text


def image_ref_problem(text: str) -> str | None:
    """Why text that IMAGE_REF lets through is still no image reference docker takes, for the one-line error of a
    flag or a setting; None when it is one."""
    if _repository_path(text) != _repository_path(text).lower():
        # docker's engine answers "400 Client Error ... repository name must be lowercase" much later
        return "has upper case in its repository name"
    problem = reference_problem(text)
    return f"is not an image reference: {problem}" if problem else None


# docker's reference grammar (distribution/reference, which the engine and the CLI parse with), on text that
# IMAGE_REF already let through and whose repository is lower case:
#   [host[:port]/]component[/component...][:tag][@digest]
# a component is lower-case letters and digits, joined by '.', '_', '__' or dashes; a tag is up to 128 word
# characters, '.' or '-', not starting with either; a digest is sha256: and 64 lower-case hex digits (the
# only one docker's store makes).
_HOST_PART = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = re.compile(rf"(?:{_HOST_PART}(?:\.{_HOST_PART})*(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


def repository_problem(text: str) -> str | None:
    """Why `text` is no repository a tag can be appended to (image_repo: rocmci adds `:<target>-<archs>`), or None."""
    if _NAME.fullmatch(text):
        return None
    return "is not a repository: it is [host[:port]/]path, of lower-case letters and digits joined by '.', '_' or '-'"


def reference_problem(ref: str) -> str | None:
    """What makes `ref` no image reference docker can read, in a few words; None when it is one."""
    name, at, digest = ref.partition("@")
    if "@" in digest:
        return "it holds more than one '@'"
    if at and not _DIGEST.fullmatch(digest):
        return "its digest is not sha256: and 64 lower-case hex digits"
    head, colon, tag = name.rpartition(":")
    if colon and "/" not in tag:  # a tag; otherwise the ':' is a registry port (host:5000/name)
        if not _TAG.fullmatch(tag):
            return f"its tag {tag[:40]!r} is not 1-128 letters, digits, '_', '.' or '-', starting with no '.' or '-'"
        name = head
    if not _NAME.fullmatch(name):
        return "its name is not [host[:port]/]path, of lower-case letters and digits joined by '.', '_' or '-'"
    return None


def _repository_path(ref: str) -> str:
    """The path part docker requires in lower case: no registry host (it may be upper case), no tag or digest."""
    name = ref.split("@", 1)[0]
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        name = rest
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def gpu_indices(flag: str, text: str) -> tuple[int, ...]:
    """'0,1' -> (0, 1): distinct GPU indices, checked before any probe or container runs."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isascii() and p.isdigit() and len(p) <= 4 for p in parts):
        raise UsageError(f"{flag} {_shown(text)} must be GPU indices like 0,1")
    indices = tuple(int(p) for p in parts)
    if len(set(indices)) != len(indices):
        raise UsageError(f"{flag} {_shown(text)} names a GPU twice")
    return indices


class EnvPairs(NamedTuple):
    """NAME=value pairs from repeated --env flags, in order; the later of two equal names wins."""

    pairs: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, str]:
        return dict(self.pairs)


def env_pairs(flag: str, items: Sequence[str]) -> EnvPairs:
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:  # the item may be the value alone, a secret: --env promises every value is redacted
            raise UsageError(f"{flag} (an item of {len(item)} characters, not shown) has no '=': it must be NAME=value",
                             hint="e.g. --env HF_HUB_OFFLINE=1")  # fmt: skip
        if not _ENV_NAME.fullmatch(name):
            raise UsageError(f"{flag} {_shown(name)} must be NAME=value", hint="e.g. --env HF_HUB_OFFLINE=1")
        out.append((name, value))
    return EnvPairs(tuple(out))


def env_names(flag: str, items: Sequence[str]) -> frozenset[str]:
    for name in items:
        if not _ENV_NAME.fullmatch(name):
            raise UsageError(f"{flag} {_shown(name)} is not a variable name", hint="e.g. --public HF_HUB_OFFLINE")
    return frozenset(items)


def shell_words(flag: str, text: str) -> tuple[str, ...]:
    """Extra arguments given as one quoted string, split like a shell would but never run by one."""
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        # not quoted: --extra is redacted in all output, and any word of it may be a secret
        raise UsageError(f"{flag} (of {len(text)} characters): {exc}", hint="balance the quotes") from None


def path_text(flag: str, text: str) -> str:
    """A path as given: non-empty, no NUL, encodable for the OS. The file itself is checked when it is read."""
    import os

    if not text:
        raise UsageError(f"{flag} needs a path")
    try:
        encoded = os.fsencode(text)
    except UnicodeError:
        raise UsageError(f"{flag} {_shown(text)} is not a valid path (not encodable)") from None
    if b"\0" in encoded:
        raise UsageError(f"{flag} {_shown(text)} is not a valid path (NUL byte)")
    if len(encoded) > 4096:
        raise UsageError(f"{flag} is not a valid path (longer than 4096 bytes)")
    return text


# scheme://userinfo@host...: a token or password in a git URL. ssh's user name (ssh://git@host, git@host:path)
# is no secret and stays.
_URL_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/@\s]*)@")


def url_credentials(text: str) -> bool:
    """Whether a URL carries credentials: any userinfo over http(s) (a token alone is one), a password elsewhere."""
    m = _URL_USERINFO.match(text)
    if m is None:
        return False
    return ":" in m.group(2) or not m.group(1).lower().startswith(("ssh://", "git+ssh://"))


def without_url_credentials(text: str) -> str:
    """The URL with its credentials shown as *** (for display only: a URL with credentials is never used)."""
    return _URL_USERINFO.sub(r"\1***@", text) if url_credentials(text) else text


def git_ref(flag: str, text: str) -> str:
    """A git revision that git cannot read as an option; passed before `--` where git allows."""
    if text.startswith("-") or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/~^@{}-]{0,199}", text):
        raise UsageError(f"{flag} {_shown(text)} is not a git ref", hint="e.g. origin/main or a commit")
    return text
