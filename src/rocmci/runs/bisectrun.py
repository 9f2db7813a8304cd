"""`run.bisect`'s effects: the checkout's history, CI's per-commit images, the resumable log, each try.

Which image holds a commit is read from the checkout's own build script (build-test-image.sh tags the
test image `${ROCM_CI_IMAGE_REPO:-rocm/vllm-ci}:${BUILDKITE_COMMIT}`); ROCM_CI_IMAGE_REPO is honoured as
the script honours it. Whether it exists is asked of the registry through the engine, without pulling.
Each try runs the commit's step, from the commit's own step file and runner, as run.step runs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rocmci.errors import InputError, UsageError

BUILD_SCRIPT = Path(".buildkite/scripts/rocm/build-test-image.sh")
# `legacy_commit_image="${ROCM_CI_IMAGE_REPO:-rocm/vllm-ci}:${BUILDKITE_COMMIT...}"`: the commit's tag.
_COMMIT_TAG = re.compile(r'"\$\{ROCM_CI_IMAGE_REPO:-([^}"\s]+)\}:\$\{BUILDKITE_COMMIT[:}?]')
MAX_CANDIDATES = 5000  # first-parent commits between good and bad; more is a wrong --good
GIT_SECONDS = 120  # the git_timeout setting's default; the bisect passes the setting
GIT_HINT = "check the checkout, or raise the setting git_timeout (ROCMCI_GIT_TIMEOUT)"


class GitDidNotAnswer(UsageError):
    """git outlived its bound: said as such, never read as git's own answer."""


def git(checkout: Path, *args: str, what: str = "git", timeout: float = GIT_SECONDS) -> str:
    """git's output; on timeout or a signal its whole process group is killed (process.run_captured)."""
    from rocmci import process

    try:
        done = process.run_captured(["git", "-C", str(checkout), *args], timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GitDidNotAnswer(f"{what}: git did not answer within {timeout:g} s",
                         hint=GIT_HINT) from None  # fmt: skip
    except OSError as exc:
        raise UsageError(f"{what}: git cannot run ({exc.strerror})", hint="install git") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise UsageError(f"{what}: {why}", hint="give commits of this checkout")
    return done.stdout


def resolve(checkout: Path, ref: str, flag: str, timeout: float = GIT_SECONDS) -> str:
    if not ref or ref.startswith("-") or any(c.isspace() or ord(c) < 32 for c in ref):
        raise UsageError(f"{flag} {ref[:40]!r} is not a git revision", hint="e.g. a commit hash, a tag or main~20")
    try:
        found = git(checkout, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", what=flag, timeout=timeout)
        return found.strip()
    except GitDidNotAnswer:
        raise
    except UsageError:  # --quiet: git says nothing, so the line says what it found
        raise UsageError(
            f"{flag} {ref[:40]!r} is not a commit of {checkout}", hint="give a commit hash, tag or ref"
        ) from None


def candidates(checkout: Path, good: str, bad: str, timeout: float = GIT_SECONDS) -> list[str]:
    """First-parent commits after good up to bad, oldest first (bad last)."""
    out = git(checkout, "rev-list", "--first-parent", "--reverse", f"{good}..{bad}", what="--good..--bad",
              timeout=timeout).split()  # fmt: skip
    if not out:
        raise UsageError("--bad is not after --good on the first-parent history", hint="swap them, or check the refs")
    if len(out) > MAX_CANDIDATES:
        raise UsageError(f"{len(out)} commits between --good and --bad (at most {MAX_CANDIDATES})",
                         hint="give a --good closer to --bad")  # fmt: skip
    return out


def image_repo(checkout: Path, environ=os.environ) -> str:
    """The repository CI tags each commit's test image in, as the checkout's build script names it."""
    script = checkout / BUILD_SCRIPT
    try:
        text = script.read_text(encoding="utf-8", errors="replace")
    except OSError:
        raise UsageError(f"no {BUILD_SCRIPT} in the checkout: which image holds a commit is unknown",
                         hint="bisect in a vLLM checkout whose CI publishes per-commit images") from None  # fmt: skip
    m = _COMMIT_TAG.search(text)
    if not m:
        raise UsageError(f"{BUILD_SCRIPT} names no per-commit image (ROCM_CI_IMAGE_REPO:BUILDKITE_COMMIT)",
                         hint="this era of vLLM's CI publishes no commit images")  # fmt: skip
    return environ.get("ROCM_CI_IMAGE_REPO") or m.group(1)


def commit_tree(checkout: Path, commit: str, folder: Path, timeout: float = GIT_SECONDS) -> Path:
    """The commit's .buildkite (its step file and runner), written below `folder`."""
    try:
        data = subprocess.run(["git", "-C", str(checkout), "archive", "--format=tar", commit, ".buildkite"],
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)  # fmt: skip
    except subprocess.TimeoutExpired:
        raise UsageError(f"git archive of {commit[:12]} did not end within {timeout:g} s",
                         hint=GIT_HINT) from None  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    if data.returncode != 0:
        return folder  # no .buildkite at that commit: the step is then not there ("skip")
    with tarfile.open(fileobj=io.BytesIO(data.stdout)) as tar:
        for member in tar.getmembers():
            if (
                member.name.startswith("/")
                or ".." in Path(member.name).parts
                or not (member.isfile() or member.isdir())
            ):
                continue
            tar.extract(member, folder, filter="data")
    return folder


@dataclass
class Tried:
    commit: str
    image: str
    digest: str | None
    outcomes: list[str]
    verdict: str
    seconds: float
    log: str
    why: str = ""

    def as_json(self) -> dict:
        return dict(self.__dict__)


class Log:
    """The JSON-lines record of every tried commit, written as each try ends; read back to resume."""

    def __init__(self, path: Path, key: dict) -> None:
        self.path = path
        self.key = key

    @classmethod
    def for_run(cls, folder: Path, key: dict) -> Log:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        return cls(folder / "bisect" / f"{digest}.jsonl", key)

    def done(self) -> dict[str, Tried]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise InputError(f"cannot read the bisect log: {exc.strerror}", where=str(self.path)) from None
        out = {}
        for number, line in enumerate(lines, 1):
            with contextlib.suppress(ValueError, TypeError, KeyError):
                record = json.loads(line)
                if number == 1:
                    if record.get("key") != self.key:
                        raise InputError("the bisect log belongs to another search", where=str(self.path),
                                         hint="remove it to start again")  # fmt: skip
                    continue
                out[record["commit"]] = Tried(**record)
        return out

    def add(self, tried: Tried) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists()
        with open(self.path, "a", encoding="utf-8") as fh:
            if fresh:
                fh.write(json.dumps({"key": self.key}) + "\n")
            fh.write(json.dumps(tried.as_json()) + "\n")
            fh.flush()
            os.fsync(fh.fileno())


@contextlib.contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="rocmci-bisect-") as folder:
        yield Path(folder)


def timed(fn: Callable[[], list[str]]) -> tuple[list[str], float]:
    started = time.monotonic()
    out = fn()
    return out, time.monotonic() - started
