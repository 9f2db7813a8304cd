"""Reading a vLLM checkout: what one is, its docker/Dockerfile.rocm (stages, ARGs with defaults and lines,
RUN bodies) and the bake file's variables; the values `settings` takes from it.

A shared leaf: settings, the hook, image/ and doctor read the checkout through here, and it imports no
area. Finding a checkout is vllm_layout's (re-exported here), which imports nothing; the `dockerfile`
package (BuildKit's own parser, so a line continuation, a JSON-form COPY or an ONBUILD is understood the
way the engine understands it) is imported only when a Dockerfile is parsed. Positions inside a
multi-line instruction (a column in a RUN body) are taken from the raw text between the instruction's
first and last line.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from rocmci.errors import InputError, UsageError
from rocmci.files import read_text
from rocmci.fixes import dockerfile_lines
from rocmci.vllm_layout import BAKE_FILE, BASE_DOCKERFILE, CHECKOUT_MARKERS, DOCKERFILE, is_checkout  # noqa: F401

MAX_FILE_BYTES = 4 * 2**20  # vLLM's Dockerfile.rocm and bake file are tens of KiB

# The stages rocmci relies on, by the names vLLM gives them.
ROCSHMEM_STAGE = "build_rocshmem"
DEEPEP_STAGE = "build_deepep"
ARCH_ARG = "DEEPEP_ROCM_ARCH"
VLLM_ARCH_ARG = "ARG_PYTORCH_ROCM_ARCH"

_VAR = re.compile(r"\$\{(\w+)(?::([-+])([^}]*))?\}|\$(\w+)")
_NAME_VAR = re.compile(r"()()()\$(\w+)")  # _VAR's second form alone, its name in the same group (4)


@dataclass(frozen=True)
class Instruction:
    cmd: str  # upper case; for ONBUILD the wrapped instruction's keyword is in `sub`
    sub: str | None
    flags: tuple[str, ...]
    value: tuple[str, ...]
    original: str
    start: int  # 1-based first and last line
    end: int
    heredocs: int = 0  # how many here-documents (RUN <<EOF) the instruction carries

    def flag(self, name: str) -> str | None:
        prefix = f"--{name}="
        return next((f[len(prefix) :] for f in self.flags if f.startswith(prefix)), None)

    def mounts(self) -> list[dict[str, str]]:
        out = []
        for f in self.flags:
            if f.startswith("--mount="):
                pairs = (p.partition("=") for p in f[len("--mount=") :].split(","))
                out.append({k: v for k, _, v in pairs})
        return out


@dataclass(frozen=True)
class ArgDecl:
    name: str
    default: str | None
    line: int
    stage: str | None  # None for the global scope before the first FROM


@dataclass
class Stage:
    name: str
    index: int
    base: str  # the FROM image as written, e.g. ${CI_BASE_IMAGE} or build_rocshmem
    line: int
    instructions: list[Instruction] = field(default_factory=list)
    _args: list[ArgDecl] | None = field(default=None, repr=False, compare=False)

    def args(self) -> list[ArgDecl]:
        if self._args is None:  # read once: a 100k-line file is asked for its ARGs per setting
            self._args = [d for i in self.instructions if i.cmd == "ARG" for d in _arg_decls(i, self.name)]
        return self._args

    def runs(self) -> list[Instruction]:
        return [i for i in self.instructions if i.cmd == "RUN"]


@dataclass
class VllmDockerfile:
    path: Path
    display: str  # how findings name the file: docker/Dockerfile.rocm
    lines: list[str]
    global_args: list[ArgDecl]
    stages: list[Stage]

    _index: dict | None = field(default=None, repr=False, compare=False)

    def _names(self) -> dict:
        """Stages by name and ARG declarations by name, built once (lookups stay linear in the file)."""
        if self._index is None:
            stages: dict[str, Stage] = {}
            for s in self.stages:
                stages.setdefault(s.name, s)
            decls: dict[str, list[ArgDecl]] = {}
            for d in [*self.global_args, *(d for s in self.stages for d in s.args())]:
                decls.setdefault(d.name, []).append(d)
            self._index = {"stages": stages, "decls": decls}
        return self._index

    def stage(self, name: str) -> Stage | None:
        return self._names()["stages"].get(name)

    def declarations(self, name: str) -> list[ArgDecl]:
        return list(self._names()["decls"].get(name, ()))

    def arg(self, name: str) -> ArgDecl | None:
        """The declaration that gives ARG `name` its default. Two different defaults are an error: one source."""
        with_default = [d for d in self.declarations(name) if d.default is not None]
        if not with_default:
            return None
        first = with_default[0]
        for other in with_default[1:]:
            if other.default != first.default:
                raise InputError(
                    f"ARG {name} has a second default {other.default!r} (first {first.default!r} at line {first.line})",
                    where=f"{self.display}:{other.line}",
                    hint="rocmci reads pins from one declaration; keep one default",
                )
        return first

    def defaults(self) -> dict[str, str]:
        """Global ARG defaults: what FROM lines and stage names are expanded with."""
        return {d.name: d.default for d in self.global_args if d.default is not None}

    def where(self, line: int, col: int = 1) -> str:
        return f"{self.display}:{line}:{col}"

    def find(self, ins: Instruction, needle: str | re.Pattern) -> tuple[int, int]:
        """Line and 1-based column of the first match of `needle` inside an instruction's raw lines."""
        for number in range(ins.start, ins.end + 1):
            text = self.lines[number - 1] if number <= len(self.lines) else ""
            if isinstance(needle, str):
                col = text.find(needle)
            else:
                m = needle.search(text)
                col = m.start() if m else -1
            if col >= 0:
                return number, col + 1
        return ins.start, 1

    def ancestors(self, stage: Stage, args: dict[str, str] | None = None) -> list[Stage]:
        """The stage and the stages it is built FROM, nearest first."""
        chain = [stage]
        scope = {**self.defaults(), **(args or {})}
        while True:
            parent = self.stage(expand(chain[-1].base, scope))
            if parent is None or parent in chain:
                return chain
            chain.append(parent)

    def arg_in_scope(self, stage: Stage, name: str) -> ArgDecl | None:
        """Where ARG `name` is declared for this stage: in it or (BuildKit) in a stage it is built FROM."""
        for s in self.ancestors(stage):
            decl = next((d for d in s.args() if d.name == name), None)
            if decl is not None:
                return decl
        return None

    def dependencies(self, stage: Stage, args: dict[str, str]) -> list[str]:
        """Stage names this stage needs: its FROM, COPY --from and RUN --mount from=."""
        scope = {**self.defaults(), **args}
        names = [expand(stage.base, scope)]
        for ins in stage.instructions:
            if ins.cmd in ("COPY", "ADD") and ins.flag("from"):
                names.append(expand(ins.flag("from") or "", scope))
            for mount in ins.mounts():
                if "from" in mount:
                    names.append(expand(mount["from"], scope))
        return [n for n in names if self.stage(n) is not None]

    def reachable(self, target: str, args: dict[str, str]) -> list[Stage]:
        """Every stage BuildKit builds for `--target target` with these build args, in file order."""
        start = self.stage(target)
        if start is None:
            raise UsageError(
                f"{self.display} has no stage {target!r}",
                hint=f"its stages: {', '.join(s.name for s in self.stages if not s.name.startswith('#'))}",
            )
        seen: set[str] = set()
        todo = [start.name]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            todo.extend(self.dependencies(self.stage(name), args))  # type: ignore[arg-type]
        return [s for s in self.stages if s.name in seen]


def expand(text: str, scope: dict[str, str]) -> str:
    """Dockerfile variable substitution for ${A}, $A, ${A:-word} and ${A:+word} (what FROM and --from use)."""

    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(4)
        value = scope.get(name, "")
        if m.group(2) == "-":
            return value or expand(m.group(3), scope)
        if m.group(2) == "+":
            return expand(m.group(3), scope) if value else ""
        return value

    # A braced ${...} ends at a '}': after the last one only $NAME can match. Without the split, every
    # '${A:-' of a text with no '}' left scanned to its end (quadratic: 10^5 characters did not finish in 10 s).
    last = text.rfind("}") + 1
    return _VAR.sub(sub, text[:last]) + _NAME_VAR.sub(sub, text[last:])


def _arg_decls(ins: Instruction, stage: str | None) -> list[ArgDecl]:
    out = []
    for word in ins.value:
        try:
            parts = shlex.split(word)
        except ValueError:
            parts = [word]
        for part in parts:
            name, eq, value = part.partition("=")
            out.append(ArgDecl(name, value if eq else None, ins.start, stage))
    return out


def parse(text: str, *, path: Path, display: str) -> VllmDockerfile:
    import dockerfile

    try:
        commands = dockerfile.parse_string(text)
    except dockerfile.GoParseError as exc:
        raise InputError(f"BuildKit's parser rejects it: {exc}", where=display) from None
    global_args: list[ArgDecl] = []
    stages: list[Stage] = []
    for c in commands:
        ins = Instruction(
            cmd=c.cmd.upper(),
            sub=c.sub_cmd.upper() if c.sub_cmd else None,
            flags=tuple(c.flags),
            value=tuple(c.value),
            original=c.original,
            start=c.start_line,
            end=c.end_line,
            heredocs=len(getattr(c, "heredocs", None) or ()),
        )
        if ins.cmd == "FROM":
            words = list(ins.value)
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"#{len(stages)}"
            stages.append(Stage(name=name, index=len(stages), base=words[0] if words else "", line=ins.start))
        elif stages:
            stages[-1].instructions.append(ins)
        elif ins.cmd == "ARG":
            global_args.extend(_arg_decls(ins, None))
    return VllmDockerfile(path, display, dockerfile_lines(text), global_args, stages)


_LOADED: dict[tuple, VllmDockerfile] = {}  # the last few files parsed, by path and what stat says of them


def load(checkout: Path, rel: Path = DOCKERFILE) -> VllmDockerfile:
    path = checkout / rel
    if not os.path.lexists(path):
        raise UsageError(f"{checkout} holds no {rel}", hint="point --vllm-src at a vLLM checkout")
    try:
        st = os.stat(path)
        key: tuple | None = (str(path), str(rel), st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is not None and key in _LOADED:  # settings and the task both read it: BuildKit's parser runs once
        return _LOADED[key]
    df = parse(_read(path), path=path, display=str(rel))
    if key is not None:
        if len(_LOADED) >= 4:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = df
    return df


def _read(path: Path) -> str:
    """A checkout file through files.read_text (regular files only, bounded), said as "cannot read: why"."""
    try:
        return read_text(path, what="vllm_src", limit=MAX_FILE_BYTES)
    except InputError as exc:
        why = exc.message.removeprefix(f"{exc.where}: ")
        raise InputError(f"cannot read: {why}", where=exc.where, hint=exc.hint) from None


# --- what DeepEP's build is given -----------------------------------------------------------------


@dataclass(frozen=True)
class SetupCall:
    """`python3 setup.py ... bdist_wheel` in build_deepep, split into what rocmci needs to repeat it."""

    instruction: Instruction
    line: int
    flags: tuple[str, ...]  # everything but --variant/--nic and their values
    nic: str | None  # as written, e.g. ${DEEPEP_NIC}


_STOP = {"&&", "||", ";", "|"}


def deepep_setup_call(df: VllmDockerfile) -> SetupCall | None:
    stage = df.stage(DEEPEP_STAGE)
    if stage is None:
        return None
    for ins in stage.runs():
        body = ins.value[0] if ins.value else ""
        if "setup.py" not in body:
            continue
        lexer = shlex.shlex(body, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:
            raise InputError(
                "cannot split DeepEP's setup.py call into words", where=df.where(ins.start)
            ) from None
        start = tokens.index("setup.py") + 1 if "setup.py" in tokens else len(tokens)
        words: list[str] = []
        for token in tokens[start:]:
            if token in _STOP or token == "bdist_wheel":
                break
            words.append(token)
        flags: list[str] = []
        nic = None
        i = 0
        while i < len(words):
            if words[i] in ("--variant", "--nic") and i + 1 < len(words):
                if words[i] == "--nic":
                    nic = words[i + 1]
                i += 2
                continue
            flags.append(words[i])
            i += 1
        line, _ = df.find(ins, "setup.py")
        return SetupCall(ins, line, tuple(flags), nic)
    return None


# --- vLLM's bake file: the arch list vLLM itself is built for ------------------------------------


def bake_variable(checkout: Path, name: str) -> tuple[str, int] | None:
    """`variable "NAME" { default = "..." }` in docker/docker-bake-rocm.hcl: value and line.

    Only this one HCL shape is read (a quoted string default inside the variable block), which is how
    vLLM declares PYTORCH_ROCM_ARCH; anything else counts as absent.
    """
    path = checkout / BAKE_FILE
    if not os.path.lexists(path):
        return None
    # Present but unreadable (a FIFO, a folder, not UTF-8) is one line naming it, not a silent "absent".
    lines = dockerfile_lines(_read(path))  # HCL, like a Dockerfile, breaks lines at line feeds only
    opening = re.compile(rf'^\s*variable\s+"{re.escape(name)}"\s*\{{')
    default = re.compile(r'^\s*default\s*=\s*"([^"\\$]*)"\s*$')
    for number, text in enumerate(lines, start=1):
        if opening.match(text):
            for offset, inner in enumerate(lines[number:], start=number + 1):
                if inner.strip().startswith("}"):
                    return None
                if m := default.match(inner):
                    return m.group(1), offset
    return None


# --- settings read from the checkout -------------------------------------------------------------


class CheckoutValues:
    """Values `settings` takes from a vLLM checkout, each with the file:line it was read at."""

    def __init__(self, checkout: Path) -> None:
        self.checkout = checkout
        self._df: VllmDockerfile | None = None

    @property
    def dockerfile(self) -> VllmDockerfile:
        if self._df is None:
            self._df = load(self.checkout)
        return self._df

    def shown(self, rel: Path) -> str:
        path = self.checkout / rel
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            return str(path)

    def read(self, spec: str) -> tuple[str | None, str]:
        kind, _, name = spec.partition(":")
        if kind == "ARG":
            decl = self.dockerfile.arg(name)
            if decl is None:
                return None, f"unset: no ARG {name}=... in {self.shown(DOCKERFILE)}"
            return decl.default, f"{self.shown(DOCKERFILE)}:{decl.line} (ARG {name})"
        if kind == "bake":
            found = bake_variable(self.checkout, name)
            if found is None:
                return None, f"unset: no variable {name!r} default in {self.shown(BAKE_FILE)}"
            return found[0], f"{self.shown(BAKE_FILE)}:{found[1]} (variable {name})"
        if kind == "deepep-flags":
            call = deepep_setup_call(self.dockerfile)
            if call is None:
                return None, f"unset: no setup.py call in {DEEPEP_STAGE} of {self.shown(DOCKERFILE)}"
            return " ".join(call.flags), f"{self.shown(DOCKERFILE)}:{call.line} ({DEEPEP_STAGE} setup.py)"
        raise ValueError(spec)
