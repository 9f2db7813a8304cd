"""Render ci-infra's test-template-amd.j2 the way bootstrap-amd.sh does, to compare rocmci against it.

bootstrap-amd.sh runs `minijinja-cli test-template-amd.j2 test-amd.yaml -D name=value ...` (2.3.1, no
flags that change the engine) and pipes the result through `sed '/^[[:space:]]*$/d'`. That means:
undefined attributes are lenient (render empty, compare false), no trim_blocks/lstrip_blocks, no
auto-escaping (the name ends in .j2 with no inner extension), no Python-style methods, every -D value a
string, and the step file read by serde_yml's rules (a fork of serde_yaml 0.9: `yes`/`on` and `0100` stay
strings; rocmci's yamldoc reads the same way). The Python binding of the same Rust engine (`minijinja` on
PyPI) is configured to match. The rendered text is read as buildkite-agent reads it (scalars.read_pipeline).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rocmci import yamldoc
from rocmci.errors import InputError
from rocmci.files import read_text
from rocmci.pipeline import amdsteps, scalars
from rocmci.pipeline.bootstrap import TemplateInputs

TEMPLATE_BYTES = 4 * 2**20  # ci-infra's template is about 40 KiB


def load_context(step_file: Path, what: str | None = "--source") -> dict[str, Any]:
    """The step file as minijinja-cli's data context.

    Read as serde_yaml reads it, YAML 1.2 core (yes/on/no stay strings, no timestamps), and through
    rocmci's one bounded loader: a FIFO, a loop, an alias bomb, a 5,000-digit integer or an explicit
    `!!binary` tag is one line with file:line, never a hang or a traceback.
    """
    doc = yamldoc.load(step_file, what=what)
    if not isinstance(doc.data, dict):
        raise InputError("the step file must be a mapping", where=doc.where(()))
    # minijinja-cli prints a null as "none"; the Python binding hands the finalizer None for both null and
    # undefined, so an env value that is null in the file (the one place the template prints one) is given
    # as the text minijinja-cli would print.
    for step in doc.data.get("steps") or ():
        env = step.get("env") if isinstance(step, dict) else None
        if isinstance(env, dict):
            step.update(env={k: "none" if v is None else v for k, v in env.items()})
    return _printed_as_2_3(doc.data)


class _Seq(list):
    """A list the binding prints as minijinja-cli 2.3.1 does (`["a", none]`); the binding calls str() on it."""

    def __str__(self) -> str:
        return amdsteps.rust_debug(self)


class _Map(dict):
    def __str__(self) -> str:
        return amdsteps.rust_debug(self)


def _printed_as_2_3(value: Any) -> Any:
    """The step file's lists and mappings, printed the 2.3.1 way (amdsteps.rust_debug) wherever the template
    prints one (a filter's argument included): the Python binding's engine is newer and prints them
    Python-style. Scalars inside a list printed by `join` still print Python-style (`None`, `True`); no
    conformance case has them."""
    if isinstance(value, dict):
        return _Map((k, _printed_as_2_3(v)) for k, v in value.items())
    if isinstance(value, list):
        return _Seq(_printed_as_2_3(v) for v in value)
    return value


def _as_rust_prints(value: Any) -> Any:
    """Print values as the Rust engine does: the Python binding would print True/None/['a'] instead.

    Undefined and none both arrive here as None; undefined (a missing step key) is the case the
    template meets, and lenient undefined prints nothing.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        return amdsteps.rust_debug(value)
    return value


# Instructions a render may take (registry.py's render_fuel): minijinja renders in native code, where Python
# cannot run a signal handler, so an endless template would ignore Ctrl-C and SIGTERM; with fuel it ends
# (about 2 s at this default) and the signal or the "ran out of fuel" line follows. ci-infra's template
# needs about 210,000.
DEFAULT_FUEL = 50_000_000


def _environment(name: str, source: str, fuel: int | None = None):
    import minijinja

    env = minijinja.Environment(
        fuel=DEFAULT_FUEL if fuel is None else fuel,
        undefined_behavior="lenient",
        finalizer=_as_rust_prints,
        pycompat=False,
        auto_escape_callback=lambda _name: None,
        keep_trailing_newline=False,
        trim_blocks=False,
        lstrip_blocks=False,
    )
    env.add_template(name, source)
    return env


def render_text(
    template_text: str, context: dict[str, Any], inputs: TemplateInputs, name: str, fuel: int | None = None
) -> str:
    """Render and drop whitespace-only lines, as bootstrap-amd.sh's sed does."""
    import minijinja

    from rocmci import process

    try:
        with process.signals_held():  # bounded by the fuel; a signal that came is taken right after
            out = _environment(name, template_text, fuel).render_template(name, **{**context, **inputs.variables()})
    except minijinja.TemplateError as exc:
        if "out of fuel" in str(exc):
            raise InputError(
                f"ci-infra template did not finish rendering within {DEFAULT_FUEL if fuel is None else fuel:,} "
                "instructions (an endless loop?)",
                where=name,
                hint="ci-infra's template needs about 210,000; the bound is the setting render_fuel "
                "(ROCMCI_RENDER_FUEL)",
            ) from None
        raise InputError(f"ci-infra template failed to render: {str(exc).splitlines()[0]}", where=name) from None
    return "".join(line + "\n" for line in out.split("\n") if line.strip())


def render_ci_infra(template: Path, step_file: Path, inputs: TemplateInputs, fuel: int | None = None) -> str:
    """ci-infra's pipeline YAML for this step file and these bootstrap inputs."""
    if not os.path.lexists(template):
        raise InputError("no such file", where=str(template), hint="point --template at test-template-amd.j2")
    text = read_text(template, what="--template", limit=TEMPLATE_BYTES)
    return render_text(text, load_context(step_file), inputs, template.name, fuel)


def parse_pipeline(text: str, where: str) -> list[Any]:
    """A rendered (or generated) pipeline as buildkite-agent reads it (scalars.read_pipeline): the top-level steps."""
    data = scalars.read_pipeline(text, where).data
    if isinstance(data, dict):
        data = data.get("steps")
    if not isinstance(data, list):
        raise InputError("a pipeline is a list of steps or a mapping with 'steps'", where=where)
    return data
