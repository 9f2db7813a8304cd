"""Following vLLM's Dockerfile.rocm as the build runs it, far enough to say what list DeepEP and rocSHMEM get.

Pure: reads the Dockerfile (already parsed by BuildKit's parser, rocmci.checkout) and the checkout files it
COPYs, runs nothing. Per stage the target really builds (FROM, COPY --from=, RUN --mount from=), in file
order, it keeps what the engine keeps:

- ARG scopes: a global ARG is seen in a stage only once re-declared there; a build argument wins over a
  default; ARGs end with their stage (a child stage does not see them), ENV is inherited through FROM;
  an ENV wins over an ARG of the same name.
- SHELL: the default `/bin/sh -c` is dash on vLLM's Ubuntu bases, so a bash-only expansion there fails
  the RUN ("Bad substitution"); `SHELL ["/bin/bash", ...]` allows it.
- RUN bodies as a shell runs them (structure from bashlex, words expanded here): `export X=...`,
  `X=... cmd` for one command, plain assignments (exported only when the name already is), quoting
  (`'${X}'` is a literal), `. file`/`source file`, `bash file`, `sh -c '...'`, functions, files
  written with `echo`/`printf ... > file` and read back by a later RUN of the stage or a child stage.
- COPY from the checkout: a script or env file copied in and then run or sourced is read from the checkout
  and followed the same way (findings name that file and line).

What it cannot follow (eval, a command substitution, a script piped from the network, a file it never saw
written, a heredoc) becomes an "unknown" value with the reason and place; the caller turns that into a
WARNING and lets the post-build evidence decide. Cost is linear in the file: each instruction is looked at
once, and only RUN bodies that build DeepEP/rocSHMEM, write a file, or run/source one are parsed as shell.
"""

from __future__ import annotations

import bisect
import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

from rocmci import checkout as co

MAX_SCRIPT_BYTES = 1 * 2**20  # a COPYed script or env file; bigger ones are not followed (a warning)
MAX_DEPTH = 8  # scripts running scripts (and functions calling functions) deeper than this are not followed
DASH, BASH, DOCKERFILE = "dash", "bash", "dockerfile"
BAD = "bad substitution: "  # a Val.why that starts so: the build fails there for certain

_RELEVANT = re.compile(r"setup\.py|all_backends|>|\bsource\b|(?:^|[\s;&|(])\.\s|\bsh\b|\bbash\b|\beval\b|\.sh\b")
_BASH_ONLY = re.compile(r"^[A-Za-z_]\w*(?:/|:[^-=?+]|\^|,|@)|^!")


@dataclass(frozen=True)
class Val:
    """A value with where it was set; text None when it cannot be known (why says so)."""

    text: str | None
    file: str
    line: int
    why: str = ""
    col: int = 1


@dataclass(frozen=True)
class Problem:
    """A place the build fails for certain (error) or the check cannot follow (warning)."""

    severity: str  # "error" | "warning"
    file: str
    line: int
    message: str
    stage: str = ""
    col: int = 1


@dataclass(frozen=True)
class BuildCall:
    """One DeepEP setup.py or rocSHMEM all_backends run: the list it is given, where it runs."""

    kind: str  # "deepep" | "rocshmem"
    stage: str
    file: str
    line: int
    value: Val | None  # None: rocSHMEM run without -DGPU_TARGETS
    col: int = 1


@dataclass
class Flow:
    calls: list[BuildCall] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    stages: list[str] = field(default_factory=list)  # the stages followed (reachable from the target)


class _Unfollowable(Exception):
    """A word or command the check cannot follow; message says why."""


class _BadSubstitution(Exception):
    pass


class _RunFails(Exception):
    """The shell stops here for certain (dash on a bash-only expansion, `source` under dash)."""


# --- word expansion --------------------------------------------------------------------------------------


class _Expander:
    """Expands one shell (or Dockerfile) word: quotes, $X, ${X}, ${X:-w}, ${X:+w}, bash's ${X//a/b}."""

    def __init__(self, lookup, dialect: str) -> None:
        self.lookup = lookup  # name -> Val | None (unset)
        self.dialect = dialect
        self.source: Val | None = None  # the last variable that gave the word a non-empty part
        self.count = 0  # how many did

    def word(self, raw: str) -> str:
        out: list[str] = []
        i, n = 0, len(raw)
        while i < n:
            c = raw[i]
            if c == "'":
                j = raw.find("'", i + 1)
                j = n if j < 0 else j
                out.append(raw[i + 1 : j])
                i = j + 1
            elif c == '"':
                i = self._double(raw, i + 1, out)
            elif c == "\\" and i + 1 < n:
                out.append(raw[i + 1])
                i += 2
            elif c == "$":
                i = self._dollar(raw, i, out)
            elif c == "`":
                raise _Unfollowable("a command substitution (`...`)")
            else:
                out.append(c)
                i += 1
        return "".join(out)

    def _double(self, raw: str, i: int, out: list[str]) -> int:
        n = len(raw)
        while i < n and raw[i] != '"':
            c = raw[i]
            if c == "\\" and i + 1 < n and raw[i + 1] in '$`"\\\n':
                out.append(raw[i + 1])
                i += 2
            elif c == "$":
                i = self._dollar(raw, i, out)
            elif c == "`":
                raise _Unfollowable("a command substitution (`...`)")
            else:
                out.append(c)
                i += 1
        return i + 1

    def _dollar(self, raw: str, i: int, out: list[str]) -> int:
        n = len(raw)
        if i + 1 >= n:
            out.append("$")
            return i + 1
        nxt = raw[i + 1]
        if nxt == "(":
            raise _Unfollowable("a command substitution $(...)")
        if nxt == "{":
            depth, j = 1, i + 2
            while j < n and depth:
                if raw[j] == "{":
                    depth += 1
                elif raw[j] == "}":
                    depth -= 1
                j += 1
            out.append(self._braced(raw[i + 2 : j - 1]))
            return j
        m = re.compile(r"[A-Za-z_]\w*|[0-9@*#?$!-]").match(raw, i + 1)
        if m is None:
            out.append("$")
            return i + 1
        out.append(self._var(m.group(0)))
        return m.end()

    def _var(self, name: str) -> str:
        if name in "*@#?$!-" and name != "@" and name != "*":
            raise _Unfollowable(f"the special parameter ${name}")
        v = self.lookup(name)
        if v is None:
            return ""
        if v.text is None:
            raise _Unfollowable(f"${name}: {v.why}")
        if v.text:
            self.source = v
            self.count += 1
        return v.text

    def _braced(self, body: str) -> str:
        if self.dialect != BASH and _BASH_ONLY.match(body):
            raise _BadSubstitution(body)
        m = re.match(r"([A-Za-z_]\w*|[0-9]+|[@*])(?:(:?[-+=?])(.*))?$", body, re.S)
        if m:
            name, op, arg = m.groups()
            v = self.lookup(name)
            is_set = v is not None and (v.text is None or bool(v.text) or not (op or "").startswith(":"))
            if op is None:
                return self._var(name)
            if op.endswith("-") or op.endswith("="):
                return self._var(name) if is_set else self.word(arg)
            if op.endswith("+"):
                return self.word(arg) if is_set else ""
            if op.endswith("?"):
                return self._var(name)
        if self.dialect == BASH:
            m = re.match(r"([A-Za-z_]\w*)(//?)([^/]*)/?(.*)$", body, re.S)
            if m:
                name, how, pat, rep = m.groups()
                text = self._var(name)
                if "*" in pat or "?" in pat or "[" in pat:
                    raise _Unfollowable(f"the pattern substitution ${{{body}}}")
                pat, rep = self.word(pat), self.word(rep)
                return text.replace(pat, rep) if how == "//" else text.replace(pat, rep, 1)
        raise _Unfollowable(f"the expansion ${{{body}}}")


def _expand(raw: str, lookup, dialect: str, file: str, line: int, col: int = 1) -> Val:
    """A word's value; its place is the variable that gave it (if one did), else the word itself."""
    ex = _Expander(lookup, dialect)
    try:
        text = ex.word(raw)
    except _Unfollowable as exc:
        return Val(None, file, line, f"{exc} at {file}:{line}", col)
    except _BadSubstitution as exc:
        return Val(None, file, line, f"{BAD}${{{exc}}}", col)
    src = ex.source
    if (
        src is not None
        and src.text is not None
        and ex.count == 1
        and text.rstrip().endswith(src.text.strip())
        and src.file != "--build-arg"
    ):
        return Val(text, src.file, src.line, col=src.col)
    return Val(text, file, line, col=col)


# --- a file's text and line numbers --------------------------------------------------------------------


class _Lines:
    """Line and column of a position in a file's text (a COPYed script)."""

    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def line(self, pos: int) -> int:
        return bisect.bisect_right(self.starts, pos)

    def col(self, pos: int) -> int:
        return pos - self.starts[bisect.bisect_right(self.starts, pos) - 1] + 1


class _Map:
    """Line and column, per character, of a RUN body joined from its Dockerfile lines."""

    def __init__(self, lines: list[int], cols: list[int]) -> None:
        self.lines, self.cols = lines, cols

    def line(self, pos: int) -> int:
        return self.lines[min(pos, len(self.lines) - 1)] if self.lines else 1

    def col(self, pos: int) -> int:
        return self.cols[min(pos, len(self.cols) - 1)] if self.cols else 1


class _Const:
    def __init__(self, line: int) -> None:
        self.line_ = line

    def line(self, pos: int) -> int:
        return self.line_

    def col(self, pos: int) -> int:
        return 1


def _run_body(df: co.VllmDockerfile, ins: co.Instruction) -> tuple[str, _Map | _Const]:
    """The shell text BuildKit hands to the shell for a RUN (continuations joined, comment lines dropped),
    with the Dockerfile line each character came from."""
    text: list[str] = []
    lines: list[int] = []
    cols: list[int] = []
    for number in range(ins.start, ins.end + 1):
        raw = df.lines[number - 1] if number <= len(df.lines) else ""
        if number > ins.start and raw.lstrip().startswith("#"):
            continue
        joined = raw[:-1] if raw.endswith("\\") else raw + ("\n" if number < ins.end else "")
        text.append(joined)
        lines.extend([number] * len(joined))
        cols.extend(range(1, len(joined) + 1))
    body = "".join(text)
    want = ins.value[0] if ins.value else ""
    at = body.rfind(want.strip()[:40]) if want.strip() else -1
    if at < 0:
        return want, _Const(ins.start)
    # The part after the RUN keyword and its flags: from where the value's first words start.
    return body[at:], _Map(lines[at:], cols[at:])


# --- the interpreter --------------------------------------------------------------------------------------


@dataclass
class _Var:
    val: Val
    exported: bool


@dataclass
class _Vfs:
    """Files the build put into a stage: from the checkout (path) or written by a RUN (text)."""

    files: dict[str, tuple[str, Path | Val]] = field(default_factory=dict)  # "file"/"dir" -> source

    def copy(self) -> _Vfs:
        return _Vfs(dict(self.files))

    def lookup(self, path: str) -> Path | Val | None:
        path = posixpath.normpath(path)
        hit = self.files.get(path)
        if hit is not None:
            return hit[1] if hit[0] == "file" else None
        parent = posixpath.dirname(path)
        while True:
            got = self.files.get(parent)
            if got is not None and got[0] == "dir" and isinstance(got[1], Path):
                return got[1] / posixpath.relpath(path, parent)
            if parent in ("/", ""):
                return None
            parent = posixpath.dirname(parent)


class _Shell:
    """One shell process: its variables, functions and working directory."""

    def __init__(self, run: _Run, env: dict[str, _Var], dialect: str, file: str, lines, text):
        self.run = run
        self.vars = env
        self.dialect = dialect
        self.file = file
        self.lines = lines
        self.text = text
        self.funcs: dict[str, object] = {}
        self.cwd = run.workdir
        self.depth = 0
        self.tainted: str | None = None  # set when a step not followed may have changed any variable
        self.unsets: set[str] = set()  # names unset here: no longer the image's value

    def line(self, pos: int) -> int:
        return self.lines.line(pos)

    def col(self, pos: int) -> int:
        return self.lines.col(pos)

    def lookup(self, name: str) -> Val | None:
        v = self.vars.get(name)
        return v.val if v else (None if name in self.unsets else self.run.unset(name))

    def warn(self, pos: int, why: str) -> None:
        self.run.flow.problems.append(Problem("warning", self.file, self.line(pos), why, self.run.stage, self.col(pos)))

    def value(self, node) -> Val:
        raw = self.text[node.pos[0] : node.pos[1]]
        return self.expand(raw, node.pos[0])

    def expand(self, raw: str, pos: int) -> Val:
        val = _expand(raw, self.lookup, self.dialect, self.file, self.line(pos), self.col(pos))
        if val.text is None and val.why.startswith(BAD):
            what = val.why[len(BAD) :]
            self.run.flow.problems.append(Problem(
                "error", self.file, self.line(pos),
                f"{what} is a bash-only expansion: the shell here is /bin/sh (dash), which stops with "
                "'Bad substitution' and the RUN fails", self.run.stage, self.col(pos)))  # fmt: skip
            raise _RunFails
        return val

    def exec_text(self, text: str) -> None:
        import bashlex

        try:
            parts = bashlex.parse(text)
        except (bashlex.errors.ParsingError, NotImplementedError, Exception) as exc:  # noqa: BLE001 (bashlex raises several)
            if _mentions_build(text):
                self.warn(0, f"cannot parse this shell text to follow it ({type(exc).__name__}: {exc})")
            return
        try:
            for node in parts:
                self.node(node)
        except _RunFails:
            if self.depth:
                raise

    def node(self, node) -> None:
        kind = node.kind
        if kind == "list" or kind == "pipeline":
            cmds = [p for p in node.parts if p.kind not in ("operator", "pipe")]
            if kind == "pipeline" and len(cmds) > 1:
                self._pipeline(cmds)
                return
            for p in cmds:
                self.node(p)
        elif kind == "compound":
            subshell = any(getattr(p, "word", None) == "(" for p in node.list)
            target = self.child() if subshell else self
            for p in node.list:
                if p.kind not in ("reservedword", "operator"):
                    target.node(p)
        elif kind in ("if", "for", "while", "until"):
            for p in node.parts:
                if p.kind not in ("reservedword", "operator", "word"):
                    self.node(p)
        elif kind == "function":
            name = node.parts[0].word
            self.funcs[name] = node.parts[-1]
        elif kind == "command":
            self.command(node)

    def _pipeline(self, cmds) -> None:
        for i, c in enumerate(cmds):
            words = [p for p in getattr(c, "parts", []) if p.kind == "word"]
            first = words[0].word if words else ""
            if (
                i > 0
                and posixpath.basename(first) in ("sh", "bash", "dash")
                and len(words) == 1
                or (
                    i > 0
                    and posixpath.basename(first) in ("sh", "bash")
                    and all(w.word.startswith("-") for w in words[1:])
                )
            ):
                if _mentions_build(self.text):
                    self.warn(c.pos[0], "a script piped into a shell (its text is not in the checkout)")
                continue
            self.child().node(c)

    def child(self) -> _Shell:
        sh = _Shell(self.run, dict(self.vars), self.dialect, self.file, self.lines, self.text)
        sh.funcs = dict(self.funcs)
        sh.cwd, sh.depth, sh.tainted, sh.unsets = self.cwd, self.depth, self.tainted, set(self.unsets)
        return sh

    def process_env(self) -> dict[str, _Var]:
        return {k: _Var(v.val, True) for k, v in self.vars.items() if v.exported}

    def command(self, node) -> None:
        assigns = [p for p in node.parts if p.kind == "assignment"]
        words = [p for p in node.parts if p.kind == "word"]
        redirects = [p for p in node.parts if p.kind == "redirect"]
        if not words:
            for a in assigns:
                name, val = self._assignment(a)
                old = self.vars.get(name)
                self.vars[name] = _Var(val, bool(old and old.exported) or self.run.allexport)
            return
        prefix = {}
        for a in assigns:
            name, val = self._assignment(a)
            prefix[name] = val
        values = [self.value(w) for w in words]
        argv0 = values[0].text
        if argv0 is None:
            if _mentions_build(self.text[node.pos[0] : node.pos[1]]):
                self.warn(node.pos[0], f"cannot tell which command runs: {values[0].why}")
            return
        base = posixpath.basename(argv0)
        if base == "env":
            rest = 1
            while rest < len(values) and re.match(r"[A-Za-z_]\w*=", values[rest].text or ""):
                name, _, text = values[rest].text.partition("=")
                prefix[name] = Val(text, values[rest].file, values[rest].line)
                rest += 1
            if rest < len(values):
                self._exec(values[rest:], words[rest:], prefix, node, redirects)
            return
        self._exec(values, words, prefix, node, redirects)

    def _assignment(self, a) -> tuple[str, Val]:
        raw = self.text[a.pos[0] : a.pos[1]]
        name, _, rhs = raw.partition("=")
        at = a.pos[0] + len(name) + 1
        val = self.expand(rhs, at)
        if (val.file, val.line, val.col) == (self.file, self.line(at), self.col(at)):  # a literal: the name's place
            val = Val(val.text, self.file, self.line(a.pos[0]), val.why, self.col(a.pos[0]))
        return name, val

    def _exec(self, values: list[Val], words, prefix: dict[str, Val], node, redirects) -> None:
        argv0 = values[0].text or ""
        base = posixpath.basename(argv0)
        args = values[1:]
        line, col = self.line(words[0].pos[0]), self.col(words[0].pos[0])
        if base in ("export", "declare", "typeset", "readonly", "local"):
            for v, w in zip(args, words[1:], strict=False):
                raw = self.text[w.pos[0] : w.pos[1]]
                if v.text is None:
                    name = raw.partition("=")[0]
                    if re.fullmatch(r"[A-Za-z_]\w*", name):
                        self.vars[name] = _Var(v, True)
                    continue
                if v.text.startswith("-"):
                    continue
                name, eq, _ = v.text.partition("=")
                if eq:
                    rhs = raw.partition("=")[2]
                    self.vars[name] = _Var(self.expand(rhs, w.pos[0]), True)
                elif name in self.vars:
                    self.vars[name] = _Var(self.vars[name].val, True)
                else:
                    self.vars[name] = _Var(Val("", self.file, line), True)
            return
        if base == "unset":
            for v in args:
                self.vars.pop(v.text or "", None)
                self.unsets.add(v.text or "")
            return
        if base == "set" and any((v.text or "") in ("-a", "-o allexport") for v in args):
            self.run.allexport = True
            return
        if base == "cd" and args and args[0].text:
            self.cwd = posixpath.normpath(posixpath.join(self.cwd, args[0].text))
            return
        if base == "eval":
            self.warn(words[0].pos[0], "eval runs text the check does not follow")
            self.tainted = f"eval at {self.file}:{line} may set it"
            return
        if base in (".", "source"):
            if base == "source" and self.dialect == DASH:
                self.run.flow.problems.append(Problem(
                    "error", self.file, line, "`source` is bash-only: /bin/sh (dash) says 'source: not found' "
                    "and the RUN fails; use `.` or SHELL [\"/bin/bash\", \"-c\"]",
                    self.run.stage, self.col(words[0].pos[0])))  # fmt: skip
                raise _RunFails
            if args:
                self._script(args[0], words[1].pos[0], same_shell=True, dialect=self.dialect)
            return
        if argv0 in self.funcs:
            if self.depth < MAX_DEPTH:
                self.depth += 1
                self.node(self.funcs[argv0])
                self.depth -= 1
            return
        env = {**self.process_env(), **{k: _Var(v, True) for k, v in prefix.items()}}
        if base in ("sh", "bash", "dash", "sh.distrib") or base.startswith("bash"):
            dialect = BASH if base.startswith("bash") else DASH
            i = 0
            while i < len(args) and (args[i].text or "").startswith("-"):
                flag = args[i].text or ""
                if "c" in flag[1:] and not flag.startswith("--"):
                    if i + 1 < len(args):
                        self._inline(args[i + 1], words[i + 2], env, dialect)
                    return
                i += 1
            if i < len(args):
                script = args[i]
                if script.text and posixpath.basename(script.text) == "all_backends":
                    self._rocshmem(args[i + 1 :], line, col)
                    return
                self._script(
                    script, words[i + 1].pos[0], same_shell=False, dialect=dialect, env=env, argv=args[i + 1 :]
                )
            return
        if base == "all_backends":
            self._rocshmem(args, line, col)
            return
        if base.startswith("python") and any(posixpath.basename(v.text or "") == "setup.py" for v in args):
            # DeepEP's, not vLLM's: run in a DeepEP folder, in vLLM's build_deepep stage, or with --variant.
            deepep = "deepep" in self.cwd.lower() or self.run.stage == co.DEEPEP_STAGE
            words = {v.text for v in args}
            cleaning = words & {"clean", "--help", "sdist", "--version"} and not words & _SETUP_BUILDS
            if (deepep or "--variant" in words) and not cleaning:
                pv = env.get("PYTORCH_ROCM_ARCH")
                gone = "PYTORCH_ROCM_ARCH" in self.unsets or "PYTORCH_ROCM_ARCH" in self.vars
                val = pv.val if pv else (None if gone else self.run.unset("PYTORCH_ROCM_ARCH"))
                if self.tainted and "PYTORCH_ROCM_ARCH" not in prefix:
                    val = Val(None, self.file, line, self.tainted)
                self.run.flow.calls.append(
                    BuildCall("deepep", self.run.stage, self.file, line, val or Val("", self.file, line, col=col), col)
                )
            return
        if base in ("echo", "printf") and redirects:
            self._write(base, args, redirects)
            return
        if "/" in argv0:  # a script run by path
            self._script(values[0], words[0].pos[0], same_shell=False, dialect=None, env=env, argv=args)

    def _inline(self, text: Val, word, env, dialect: str) -> None:
        if text.text is None:
            self.warn(word.pos[0], f"cannot know the text given to the shell: {text.why}")
            return
        # The -c text is a part of this file: positions map back through the word's own place.
        start = word.pos[0] + (1 if self.text[word.pos[0]] in "'\"" else 0)
        same = self.text[start : start + len(text.text)] == text.text
        inner = self.text[start : start + len(text.text)] if same else text.text
        sh = _Shell(self.run, dict(env), dialect, self.file, _Offset(self, start), inner)
        sh.cwd, sh.depth = self.cwd, self.depth + 1
        sh.exec_text(inner)

    def _script(self, path: Val, pos: int, *, same_shell: bool, dialect: str | None, env=None, argv=()) -> None:
        if path.text is None:
            self.warn(pos, f"cannot know which file runs: {path.why}")
            return
        where = posixpath.join(self.cwd, path.text)
        found = self.run.vfs.lookup(where)
        if found is None:
            if _mentions_build(self.text) or same_shell:
                self.warn(pos, f"{path.text} is not a file this build copied from the checkout or wrote; "
                               "what it sets or builds is not followed")  # fmt: skip
            if same_shell:
                self.tainted = f"{path.text}, sourced at {self.file}:{self.line(pos)}, may set it"
            return
        if self.depth >= MAX_DEPTH:
            self.warn(pos, f"{path.text}: scripts nested deeper than {MAX_DEPTH} are not followed")
            return
        if isinstance(found, Path):
            try:
                with open(found, "rb") as fh:
                    data = fh.read(MAX_SCRIPT_BYTES + 1)
            except OSError as exc:
                self.warn(pos, f"cannot read {found}: {exc.strerror}")
                return
            if len(data) > MAX_SCRIPT_BYTES:
                self.warn(pos, f"{path.text} is over {MAX_SCRIPT_BYTES} bytes; not followed")
                return
            text = data.decode("utf-8", "replace")
            file = self.run.display(found)
            lines: _Lines | _Const = _Lines(text)
        else:
            if found.text is None:
                self.warn(pos, f"{path.text} was written with text that cannot be known: {found.why}")
                return
            text, file, lines = found.text, found.file, _Const(found.line)
        if dialect is None:
            first = text.split("\n", 1)[0]
            dialect = BASH if first.startswith("#!") and "bash" in first else DASH
        if same_shell:
            sh = _Shell(self.run, self.vars, self.dialect, file, lines, text)
            sh.funcs = self.funcs
        else:
            sh = _Shell(self.run, dict(env or {}), dialect, file, lines, text)
            for i, v in enumerate(argv, 1):  # $1 ... of the script
                sh.vars[str(i)] = _Var(v, False)
        sh.cwd, sh.depth = self.cwd, self.depth + 1
        sh.exec_text(text)
        if same_shell:
            self.cwd, self.tainted = sh.cwd, sh.tainted

    def _rocshmem(self, args: list[Val], line: int, col: int) -> None:
        value = None
        for v in args:
            if v.text is None:
                if "GPU_TARGETS" in v.why or "-D" in v.why:
                    value = Val(None, v.file, v.line, v.why)
                continue
            if v.text.startswith("-DGPU_TARGETS="):
                text = v.text.split("=", 1)[1]
                value = Val(text, v.file, v.line, col=v.col)
        if self.tainted and value is not None:
            value = Val(None, self.file, line, self.tainted, col)
        self.run.flow.calls.append(BuildCall("rocshmem", self.run.stage, self.file, line, value, col))

    def _write(self, base: str, args: list[Val], redirects) -> None:
        for r in redirects:
            if r.type not in (">", ">>") or not hasattr(r.output, "pos"):
                continue
            target = self.value(r.output).text
            if target is None:
                continue
            if any(v.text is None for v in args):
                why = next(v.why for v in args if v.text is None)
                text = None
            else:
                words = [v.text or "" for v in args]
                if base == "echo":
                    words = [w for w in words if w not in ("-n", "-e")] if words and words[0] in ("-n", "-e") else words
                    text = " ".join(words) + "\n"
                else:
                    text = _printf(words)
                why = "" if text is not None else f"a printf format beyond %s at {self.file}:{self.line(r.pos[0])}"
            path = posixpath.normpath(posixpath.join(self.cwd, target))
            line = self.line(r.pos[0])
            old = self.run.vfs.files.get(path)
            if r.type == ">>" and old and isinstance(old[1], Val) and old[1].text is not None and text is not None:
                text = old[1].text + text
            self.run.vfs.files[path] = ("file", Val(text, self.file, line, why))


class _Offset:
    """Line numbers for a text that starts at `start` inside another shell's text."""

    def __init__(self, outer: _Shell, start: int) -> None:
        self.outer, self.start = outer, start

    def line(self, pos: int) -> int:
        return self.outer.line(self.start + pos)

    def col(self, pos: int) -> int:
        return self.outer.col(self.start + pos)


_SETUP_BUILDS = frozenset({"bdist_wheel", "build", "build_ext", "install", "develop", "bdist_egg"})


def _printf(words: list[str]) -> str | None:
    """printf FORMAT ARGS with only %s and \\n in FORMAT (what an env file is written with); else unknown."""
    if not words:
        return ""
    fmt, rest = words[0], words[1:]
    parts = fmt.split("%s")
    if "%" in fmt.replace("%s", "") or len(parts) - 1 != len(rest):
        return None
    out = parts[0] + "".join(a + p for a, p in zip(rest, parts[1:], strict=True))
    return out.replace("\\n", "\n")


def _mentions_build(text: str) -> bool:
    return "setup.py" in text or "all_backends" in text or "PYTORCH_ROCM_ARCH" in text or "GPU_TARGETS" in text


# --- the Dockerfile ------------------------------------------------------------------------------------


@dataclass
class _StageState:
    env: dict[str, Val]
    shell: str
    vfs: _Vfs
    base: str  # the external image the chain starts from, for "whatever it sets"
    args: dict[str, Val] = field(default_factory=dict)


class _Run:
    """What one RUN (or a script it runs) shares: the flow it reports to, the stage's files."""

    def __init__(self, flow: Flow, stage: str, vfs: _Vfs, workdir: str, unset, display) -> None:
        self.flow, self.stage, self.vfs, self.workdir = flow, stage, vfs, workdir
        self.unset = unset
        self.display = display
        self.allexport = False


def follow(
    df: co.VllmDockerfile, target: str, build_args: dict[str, str], root: Path | None = None, *, buildkit: bool = True
) -> Flow:
    """Follow the stages `target` builds, with these build arguments; root is the checkout (for COPY).

    buildkit: a stage built FROM another keeps that stage's ARG values (BuildKit, what rocmci and vLLM's CI
    build with); the classic builder (DOCKER_BUILDKIT=0) ends every ARG with its stage.
    """
    flow = Flow()
    root = root if root is not None else _root(df)
    by_name = {s.name: s for s in df.stages}
    glob_scope: dict[str, str] = {}
    glob_vals: dict[str, Val] = {}
    for d in df.global_args:
        if d.name in build_args:
            glob_vals[d.name] = Val(build_args[d.name], "--build-arg", 0)
        elif d.default is not None:
            glob_vals[d.name] = _expand(d.default, lambda n: glob_vals.get(n), DOCKERFILE, df.display, d.line)
        glob_scope[d.name] = glob_vals[d.name].text or "" if d.name in glob_vals else ""
    # A file without the target (a hand-written one) is followed whole: every stage it builds.
    needed = _reachable(df, by_name, target, glob_scope) if target in by_name else set(by_name)
    flow.stages = [s.name for s in df.stages if s.name in needed]
    states: dict[str, _StageState] = {}

    def display(path: Path) -> str:
        try:
            return str(path.relative_to(root))
        except ValueError:
            return str(path)

    for stage in df.stages:
        if stage.name not in needed:
            continue
        parent = states.get(co.expand(stage.base, glob_scope))
        if parent is not None:
            st = _StageState(dict(parent.env), parent.shell, parent.vfs.copy(), parent.base,
                             dict(parent.args) if buildkit else {})  # fmt: skip
        else:
            st = _StageState({}, DASH, _Vfs(), co.expand(stage.base, glob_scope))
        args = st.args
        workdir = "/"
        known_empty = st.base == "scratch"

        def unset(name: str, st=st, stage=stage, known_empty=known_empty) -> Val | None:
            if known_empty or name not in _BASE_IMAGE_NAMES:
                return None
            return Val(None, df.display, stage.line, f"${name} is whatever the image {st.base} sets")

        def lookup(name: str, st=st, args=args, unset=unset) -> Val | None:
            return st.env.get(name) or args.get(name) or unset(name)

        for ins in stage.instructions:
            cmd = ins.sub if ins.cmd == "ONBUILD" else ins.cmd
            if ins.cmd == "ONBUILD":
                continue
            if cmd == "ARG":
                for word in ins.value:
                    name, eq, default = word.partition("=")
                    if name in build_args:
                        args[name] = Val(build_args[name], "--build-arg", 0)
                    elif eq:
                        args[name] = _expand(default, lookup, DOCKERFILE, df.display, *df.find(ins, name))
                    elif name in glob_vals:
                        args[name] = glob_vals[name]
                    else:
                        args.pop(name, None)
            elif cmd == "ENV":
                pairs = list(zip(ins.value[::2], ins.value[1::2], strict=False))
                # All values of one ENV are expanded with the variables before it (Docker's rule).
                done = []
                for k, v in pairs:
                    at = df.find(ins, re.compile(rf"\b{re.escape(k)}\b"))
                    done.append((k, _expand(v, lookup, DOCKERFILE, df.display, *at)))
                for k, v in done:
                    st.env[k] = v
            elif cmd == "SHELL":
                first = ins.value[0] if ins.value else "/bin/sh"
                st.shell = BASH if "bash" in posixpath.basename(first) else DASH
            elif cmd == "WORKDIR" and ins.value:
                wd = _expand(ins.value[0], lookup, DOCKERFILE, df.display, ins.start).text or "/"
                workdir = posixpath.normpath(posixpath.join(workdir, wd))
            elif cmd in ("COPY", "ADD"):
                _copy(df, ins, st, states, lookup, workdir, root, glob_scope)
            elif cmd == "RUN":
                _run(df, ins, stage, st, args, workdir, flow, unset, display)
        states[stage.name] = st
    return flow


# Variables vLLM's ROCm base images set (ENV PYTORCH_ROCM_ARCH in Dockerfile.rocm_base): their value in a stage
# built on an image is that image's, unknown here. Any other unset name is empty, as in the engine.
_BASE_IMAGE_NAMES = frozenset({"PYTORCH_ROCM_ARCH"})


def _copy(df, ins, st: _StageState, states, lookup, workdir: str, root: Path, glob_scope) -> None:
    words = [_expand(w, lookup, DOCKERFILE, df.display, ins.start).text or "" for w in ins.value]
    if len(words) < 2:
        return
    *srcs, dest = words
    dest_abs = posixpath.normpath(posixpath.join(workdir, dest))
    into_dir = dest.endswith("/") or len(srcs) > 1
    frm = ins.flag("from")
    if frm is not None:
        other = states.get(co.expand(frm, glob_scope))
        if other is None:
            return
        for src in srcs:
            src = posixpath.normpath(posixpath.join("/", src))
            for path, entry in list(other.vfs.files.items()):
                if path == src or path.startswith(src.rstrip("/") + "/"):
                    rel = posixpath.relpath(path, src)
                    to = (
                        posixpath.join(dest_abs, posixpath.basename(path))
                        if path == src and into_dir
                        else (dest_abs if rel == "." else posixpath.join(dest_abs, rel))
                    )
                    st.vfs.files[posixpath.normpath(to)] = entry
        return
    for src in srcs:
        if any(c in src for c in "*?["):
            continue
        local = (root / src.lstrip("/")).resolve()
        try:
            local.relative_to(root.resolve())
        except ValueError:
            continue
        name = posixpath.basename(src.rstrip("/"))
        to = posixpath.join(dest_abs, name) if into_dir and not local.is_dir() else dest_abs
        st.vfs.files[posixpath.normpath(to)] = ("dir" if local.is_dir() else "file", local)


def _run(df, ins, stage, st: _StageState, args: dict[str, Val], workdir, flow: Flow, unset, display) -> None:
    body = ins.value[0] if ins.value else ""
    exec_form = ins.original.split(None, 1)[-1].lstrip().startswith("[") if ins.original else False
    if ins.heredocs:
        if _mentions_build(ins.original):
            flow.problems.append(Problem("warning", df.display, ins.start, "a RUN heredoc is not followed", stage.name))
        return
    if not _RELEVANT.search(body) and not any(p in body for p in _script_names(st.vfs)):
        return
    env = {k: _Var(v, True) for k, v in args.items()}
    env.update({k: _Var(v, True) for k, v in st.env.items()})
    run = _Run(flow, stage.name, st.vfs, workdir, unset, display)
    if exec_form:
        argv = list(ins.value)
        text = " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)
        sh = _Shell(run, env, st.shell, df.display, _Const(ins.start), text)
        sh.exec_text(text)
        return
    text, lines = _run_body(df, ins)
    sh = _Shell(run, env, st.shell, df.display, lines, text)
    sh.exec_text(text)


def _script_names(vfs: _Vfs) -> list[str]:
    return [posixpath.basename(p) for p in vfs.files][:64]


def _reachable(df, by_name, target: str, scope: dict[str, str]) -> set[str]:
    if target not in by_name:
        return set()
    seen: set[str] = set()
    todo = [target]
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        stage = by_name[name]
        todo.append(co.expand(stage.base, scope))
        for ins in stage.instructions:
            if ins.cmd in ("COPY", "ADD") and ins.flag("from"):
                todo.append(co.expand(ins.flag("from") or "", scope))
            for mount in ins.mounts() if ins.cmd == "RUN" and "--mount" in "".join(ins.flags) else ():
                if "from" in mount:
                    todo.append(co.expand(mount["from"], scope))
    return seen


def _root(df: co.VllmDockerfile) -> Path:
    path, display = str(df.path), df.display
    return Path(path[: -len(display)]) if display and path.endswith(display) else Path(os.path.dirname(path))


# --- what DeepEP's setup.py makes of PYTORCH_ROCM_ARCH ---------------------------------------------------


def deepep_effective(text: str) -> tuple[str, ...] | None:
    """The list DeepEP's setup.py builds for a PYTORCH_ROCM_ARCH (its rocm branch): empty means its default
    gfx942;gfx950; otherwise ',' or ';' separated, filtered to gfx942/gfx950; None when none is kept (the
    build fails). Source: DeepEP setup.py, `if variant == "rocm"` (tests read it from the fixtures)."""
    from rocmci import arch as archmod

    text = text.strip()
    if not text:
        return archmod.DEEPEP_DEFAULT_ARCHS
    raw = [a.strip() for a in text.replace(",", ";").split(";") if a.strip()]
    keep = tuple(dict.fromkeys(a for a in raw if a in archmod.DEEPEP_ARCHS))
    return keep or None
