"""The settings registry (registry.py) resolved through one precedence chain.

built-in default (or the Dockerfile's ARG default) < pyproject [tool.rocmci] < ROCMCI_<NAME> env < flag.
Every resolved value remembers where it came from, so `rocmci settings` can show it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from rocmci.errors import InputError, UsageError
from rocmci.registry import BY_NAME, ENV_PREFIX, REGISTRY, Setting  # noqa: F401  (settings' API)
from rocmci.values import CONTROL, parse_int


class Resolved(NamedTuple):
    value: Any
    source: str


class Settings:
    """Every setting's resolved value (as an attribute: `s.arch`) and where it came from."""

    def __init__(self, workspace: Path, values: dict[str, Resolved] | None = None) -> None:
        self.workspace = workspace
        self.values: dict[str, Resolved] = {} if values is None else values

    def __repr__(self) -> str:
        return f"Settings(workspace={self.workspace!r}, values={self.values!r})"

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name].value
        except KeyError:
            raise AttributeError(name) from None

    def origin(self, name: str) -> str:
        return self.values[name].source

    def require(self, name: str) -> Any:
        """The value, or a usage error saying how to give it when nothing set it."""
        value = getattr(self, name)
        if value is None:
            setting = BY_NAME[name]
            raise UsageError(
                f"setting {name!r} has no value ({self.origin(name)})",
                hint=f"set {setting.env_var}"
                + (f", or {NO_CHECKOUT}" if setting.from_vllm and not self.vllm_src else ""),
            )
        return value

    def describe(self, name: str) -> str:
        """Where a value came from, for error messages: "setting 'source' (env ROCMCI_SOURCE)"."""
        return f"setting {name!r} ({self.origin(name)})"

    def path(self, name: str) -> Path:
        # realpath, not Path.resolve(): on a symlink loop it returns the path (3.11's resolve raises
        # RuntimeError), and the file reader then names the loop and this setting in one line.
        text = str(getattr(self, name))
        if not text.strip():  # else ROCMCI_WORKAROUNDS= became the workspace itself: "'.': is a directory"
            raise UsageError(f"setting {name} ({self.origin(name)}) is empty", hint="give a path, or unset it")
        return Path(os.path.realpath(self.workspace / os.path.expanduser(text)))

    def rows(self) -> list[tuple[str, str, str]]:
        """For display (the table and --json alike): a URL's credentials (ROCMCI_DEEPEP_REPO=https://oauth2:...@...)
        and any other credential shape are shown as ***."""
        from rocmci.secrets import Redactor
        from rocmci.values import without_url_credentials

        mask = Redactor()
        return [
            (s.name, mask(without_url_credentials(str(self.values[s.name].value))), self.values[s.name].source)
            for s in REGISTRY
        ]


def suggest(name: str, known: list[str] | None = None) -> str:
    choices = known if known is not None else list(BY_NAME)
    import difflib  # only when a name is unknown: its import is a cost on every start
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else "run `rocmci settings` to list them"


def _unknown(name: str, where: str) -> UsageError:
    return UsageError(f"unknown setting {name!r} in {where}", hint=suggest(name))


_TRUE = {"true", "1"}
_FALSE = {"false", "0"}


def _short(raw: Any) -> str:
    """repr of a value, redacted and cut to fit one line of an error (values.shown)."""
    from rocmci.values import shown, shown_repr

    return shown(raw) if isinstance(raw, str) else shown_repr(raw)


def _bad(setting: Setting, where: str, what: str, raw: Any, hint: str | None = None) -> UsageError:
    return UsageError(f"setting {setting.name!r} from {where} {what}, got {_short(raw)}", hint=hint)


def _convert_int(setting: Setting, raw: Any, where: str) -> int:
    try:
        number = parse_int(raw, setting.name)  # the one parser of numbers from outside (ASCII digits, bounded)
    except UsageError:
        # TOML floats (2.9, inf, nan), booleans, text like '2.9', '1e3', '0x10', '²' or 5,000 digits.
        raise _bad(setting, where, "must be an integer", raw) from None
    if setting.min is not None and number < setting.min:
        raise _bad(setting, where, f"must be at least {setting.min}", number)
    if setting.max is not None and number > setting.max:
        raise _bad(setting, where, f"must be at most {setting.max}", number)
    return number


def _convert_bool(setting: Setting, raw: Any, where: str) -> bool:
    if isinstance(raw, bool):
        return raw
    text = raw.strip().lower() if isinstance(raw, str) else None
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _bad(setting, where, "must be true or false", raw, hint="use true, false, 1 or 0")


def _convert_str(setting: Setting, raw: Any, where: str) -> str:
    if not isinstance(raw, str):
        raise UsageError(
            f"setting {setting.name!r} from {where} must be a string, got {type(raw).__name__} {_short(raw)}"
        )
    control = CONTROL.search(raw)
    if control:
        # No setting is multi-line; a newline or NUL in a value that reaches a command line is an attack or a typo.
        raise _bad(setting, where, f"contains the control character {control.group()!r}", raw)
    if setting.choices is not None and raw not in setting.choices:
        import difflib  # only when a name is unknown: its import is a cost on every start
        close = difflib.get_close_matches(raw, setting.choices, n=1, cutoff=0.6)
        shown = ", ".join(c if c else repr(c) for c in setting.choices)  # the empty choice as ''
        hint = f"did you mean {close[0]!r}?" if close else f"choose one of: {shown}"
        raise _bad(setting, where, "is not one of the known values", raw, hint=hint)
    if setting.pattern is not None and not re.fullmatch(setting.pattern, raw):
        raise _bad(setting, where, _why_not_valid(raw, setting.pattern), raw, hint=setting.pattern_hint)
    if raw and setting.check is not None:
        # docker's reference grammar (values.image_ref_problem, the rule of --tag and --image too): its engine would
        # say so only when the build ends ("repository name must be lowercase", "invalid reference format")
        problem = setting.check(raw)
        if problem:
            raise _bad(setting, where, problem, raw, hint=setting.pattern_hint)
    return raw


def _why_not_valid(raw: str, pattern: str) -> str:
    """'is not valid', with the most telling reason the value fails its pattern, for the one-line error."""
    if raw.startswith("-") and not re.fullmatch(pattern, "-a"):
        return "is not valid: it starts with '-' (a command would read it as an option)"
    if not raw:
        return "is not valid: it is empty"
    for c in dict.fromkeys(raw):  # the first character the rule refuses even between two letters
        if not (c.isascii() and c.isalnum()) and not re.fullmatch(pattern, f"a{c}a"):
            return "is not valid: it contains whitespace" if c.isspace() else f"is not valid: it contains {c!r}"
    return "is not valid"


def convert(setting: Setting, raw: Any, where: str) -> Any:
    """The typed value of `raw` (TOML value, env text or flag) for `setting`; UsageError (exit 2) otherwise."""
    if setting.kind is int:
        return _convert_int(setting, raw, where)
    if setting.kind is bool:
        return _convert_bool(setting, raw, where)
    return _convert_str(setting, raw, where)


def find_checkout(start: Path | None = None) -> Path | None:
    """The vLLM checkout holding `start` (default: the current folder): it or the nearest folder above it."""
    from rocmci.vllm_layout import is_checkout

    here = Path(os.path.realpath(start or Path.cwd()))
    return next((folder for folder in (here, *here.parents) if is_checkout(folder)), None)


def find_workspace(start: Path | None = None) -> Path:
    """Where settings and relative paths are read from.

    The nearest folder upwards whose pyproject.toml has [tool.rocmci], looking no higher than the vLLM
    checkout that holds the start folder (a vLLM clone kept inside some other project is its own
    workspace); else that checkout's root, so every task works from any of its subfolders; else the
    start folder.
    """
    from rocmci.files import read_text

    here = Path(os.path.realpath(start or Path.cwd()))
    checkout = find_checkout(here)
    for folder in (here, *here.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file() and "[tool.rocmci]" in read_text(candidate, what="the workspace's pyproject.toml"):
            return folder
        if folder == checkout:
            break
    return checkout or here


def read_pyproject(workspace: Path) -> dict[str, Any]:
    from rocmci.files import parse_toml, read_text

    path = workspace / "pyproject.toml"
    if not path.exists() and not path.is_symlink():
        return {}
    text = read_text(path, what="the workspace's pyproject.toml")
    data = parse_toml(text, str(path))  # bounded: huge integers and deep nesting are one line, not a traceback
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise InputError(f"'tool' must be a table, got {type(tool).__name__} {_short(tool)}", where=str(path))
    section = tool.get("rocmci", {})
    if not isinstance(section, dict):
        raise InputError("[tool.rocmci] must be a table", where=str(path))
    return section


def _check_env_names(env: Mapping[str, str]) -> None:
    """Every ROCMCI_* variable, in any case, must be exactly a setting's name.

    Environment names are case-sensitive, so ROCMCI_Arch is not ROCMCI_ARCH: rather than guess
    which of two spellings wins, a name that is not exact is refused with the exact one.
    """
    known_vars = [st.env_var for st in REGISTRY]
    exact = set(known_vars)
    for var in env:
        if not var.upper().startswith(ENV_PREFIX) or var in exact:
            continue
        if var.upper() in exact:
            raise UsageError(
                f"environment variable {var} is not upper case",
                hint=f"did you mean {var.upper()!r}? rocmci reads only the upper-case name",
            )
        raise UsageError(f"unknown setting in environment variable {var}", hint=suggest(var.upper(), known_vars))


def resolve(
    workspace: Path | None = None,
    *,
    flags: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    pyproject: Mapping[str, Any] | None = None,
) -> Settings:
    """Resolve every setting. `flags` holds only the flags the user gave (None means not given)."""
    workspace = workspace or find_workspace()
    env = os.environ if env is None else env
    pyproject = read_pyproject(workspace) if pyproject is None else pyproject
    flags = {k: v for k, v in (flags or {}).items() if v is not None}

    for name in pyproject:
        if name not in BY_NAME:
            raise _unknown(name, "pyproject.toml [tool.rocmci]")
    _check_env_names(env)
    for name in flags:
        if name not in BY_NAME:
            raise _unknown(name, "flags")

    settings = Settings(workspace=workspace)

    def layered(setting: Setting, base: Resolved) -> Resolved:
        result = base
        if setting.name in pyproject:
            where = "pyproject.toml [tool.rocmci]"
            result = Resolved(convert(setting, pyproject[setting.name], where), where)
        if setting.ci_env and env.get(setting.ci_env):  # set and not empty, as ci-bake-rocm.sh's ${VAR:-}
            where = f"env {setting.ci_env} (as vLLM's ci-bake-rocm.sh reads it)"
            result = Resolved(convert(setting, env[setting.ci_env], where), where)
        if setting.env_var in env:
            where = f"env {setting.env_var}"
            result = Resolved(convert(setting, env[setting.env_var], where), where)
        if setting.name in flags:
            where = f"flag {setting.flag_text}"
            result = Resolved(convert(setting, flags[setting.name], where), where)
        return result

    for setting in REGISTRY:
        if setting.from_vllm is None:
            settings.values[setting.name] = layered(setting, Resolved(setting.default, "default"))
    settings.values["vllm_src"] = _vllm_checkout(settings.values["vllm_src"], workspace)

    checkout = Path(settings.vllm_src) if settings.vllm_src else None
    values = None
    for setting in REGISTRY:
        if setting.from_vllm is None:
            continue
        overridden = (setting.name in flags or setting.env_var in env or setting.name in pyproject
                      or bool(setting.ci_env and env.get(setting.ci_env)))
        if overridden:
            base = Resolved(None, "")
        elif checkout is None:
            base = _without_checkout(setting)
        else:
            if values is None:
                from rocmci.checkout import CheckoutValues

                values = CheckoutValues(checkout)
            base = Resolved(*values.read(setting.from_vllm))
        settings.values[setting.name] = layered(setting, base)
    return settings


NO_CHECKOUT = "pass --vllm-src PATH (a vLLM checkout), set ROCMCI_VLLM_SRC, or run from a vLLM checkout"


def _vllm_checkout(given: Resolved, workspace: Path) -> Resolved:
    """The vLLM checkout: as given (checked), else the one holding the current folder, else '' (unset)."""
    from rocmci.vllm_layout import DOCKERFILE

    if given.value:
        shown = f"vllm_src {_short(given.value)} ({given.source})"
        hint = "point it at a vLLM checkout"
        try:
            os.fsencode(given.value)  # a lone surrogate (from a flag) cannot name any file
        except UnicodeEncodeError:
            raise UsageError(f"{shown} is not valid text for a path", hint=hint) from None
        base = workspace if given.source.startswith("pyproject") else Path.cwd()
        # realpath, not Path.resolve(): a symlink loop stays in the path (3.11's resolve raises RuntimeError)
        # and the stat below names it; a NUL was refused as a control character already.
        folder = os.path.realpath(os.path.join(base, os.path.expanduser(given.value)))
        problem = _not_a_dockerfile(Path(folder) / DOCKERFILE)
        if problem:
            raise UsageError(f"{shown} {problem}", hint=hint)
        return Resolved(folder, given.source)
    here = Path(os.path.realpath(Path.cwd()))
    found = find_checkout(here)
    if found == here:
        return Resolved(str(here), "default: the current folder is a vLLM checkout")
    if found is not None:
        return Resolved(str(found), "default: the vLLM checkout holding the current folder")
    return Resolved("", "unset: the current folder is not a vLLM checkout (no docker/Dockerfile.rocm + setup.py)")


_STAT_PROBLEMS = {
    errno.ELOOP: "is a symlink loop",
    errno.ENAMETOOLONG: "is too long a path",
    errno.EACCES: "cannot be read (permission denied)",
    errno.EPERM: "cannot be read (permission denied)",
    errno.ENOTDIR: "is not a folder",
}


def _not_a_dockerfile(path: Path) -> str | None:
    """Why `path` cannot be the checkout's Dockerfile (None when it is a regular file); never raises."""
    from rocmci.vllm_layout import DOCKERFILE

    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return _STAT_PROBLEMS.get(exc.errno or 0, f"holds no {DOCKERFILE}")
    except ValueError:
        return "is not a valid path"
    if not stat.S_ISREG(mode):
        return f"holds a {DOCKERFILE} that is not a regular file"
    return None


def _without_checkout(setting: Setting) -> Resolved:
    if setting.name == "arch":
        from rocmci.arch import DEEPEP_DEFAULT_ARCHS, canonical

        # Other areas (pipeline rules, the hook, doctor) need a list even outside a vLLM checkout:
        # DeepEP's own default is the list its setup.py builds when PYTORCH_ROCM_ARCH is unset.
        return Resolved(canonical(DEEPEP_DEFAULT_ARCHS), "default: DeepEP setup.py's list (no vLLM checkout)")
    return Resolved(None, "unset: no vLLM checkout (--vllm-src)")
