"""Render ci-infra's test-template-amd.j2 the way bootstrap-amd.sh does, to compare rocmci against it.

bootstrap-amd.sh runs `minijinja-cli test-template-amd.j2 test-amd.yaml -D name=value ...` (2.3.1, no
flags that change the engine) and pipes the result through `sed '/^[[:space:]]*$/d'`. That means:
undefined attributes are lenient (render empty, compare false), no trim_blocks/lstrip_blocks, no
auto-escaping (the name ends in .j2 with no inner extension), no Python-style methods, every -D value a
string, and the step file read as YAML 1.2 (serde_yaml: `yes`/`on` stay strings). The Python binding of
the same Rust engine (`minijinja` on PyPI) is configured to match.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from rocmci.errors import InputError
from rocmci.pipeline.bootstrap import TemplateInputs

try:
    from yaml import CSafeLoader as _Base
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _Base  # type: ignore[assignment]


class CoreSchemaLoader(_Base):
    """YAML 1.2 core schema: only true/false, null/~, numbers are implicit; yes/no/on/off stay strings."""

    yaml_implicit_resolvers: dict = {}


for _tag, _pattern, _first in (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", "~nN"),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?)$", "-+.0123456789"),
):
    CoreSchemaLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))
CoreSchemaLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^$"), [""])


def load_context(step_file: Path) -> dict[str, Any]:
    """The step file as minijinja-cli's data context."""
    try:
        data = yaml.load(step_file.read_text(encoding="utf-8"), Loader=CoreSchemaLoader)  # noqa: S506 - safe loader
    except FileNotFoundError:
        raise InputError("no such file", where=str(step_file)) from None
    except yaml.YAMLError as exc:
        raise InputError(f"invalid YAML: {exc}".splitlines()[0], where=str(step_file)) from None
    if not isinstance(data, dict):
        raise InputError("the step file must be a mapping", where=str(step_file))
    return data


def _as_rust_prints(value: Any) -> Any:
    """Print values as the Rust engine does: the Python binding would print True/None/['a'] instead.

    Undefined and none both arrive here as None; undefined (a missing step key) is the case the
    template meets, and lenient undefined prints nothing.
    """
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return value


def _environment(name: str, source: str):
    import minijinja

    env = minijinja.Environment(
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


def render_text(template_text: str, context: dict[str, Any], inputs: TemplateInputs, name: str) -> str:
    """Render and drop whitespace-only lines, as bootstrap-amd.sh's sed does."""
    import minijinja

    try:
        out = _environment(name, template_text).render_template(name, **{**context, **inputs.variables()})
    except minijinja.TemplateError as exc:
        raise InputError(f"ci-infra template failed to render: {str(exc).splitlines()[0]}", where=name) from None
    return "".join(line + "\n" for line in out.split("\n") if line.strip())


def render_ci_infra(template: Path, step_file: Path, inputs: TemplateInputs) -> str:
    """ci-infra's pipeline YAML for this step file and these bootstrap inputs."""
    try:
        text = template.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such file", where=str(template), hint="point --template at test-template-amd.j2") from None
    return render_text(text, load_context(step_file), inputs, template.name)


def parse_pipeline(text: str, where: str) -> list[Any]:
    """A rendered (or generated) pipeline as Buildkite reads it: the list of top-level steps."""
    try:
        data = yaml.load(text, Loader=_Base)  # noqa: S506 - safe loader
    except yaml.YAMLError as exc:
        raise InputError(f"the pipeline is not valid YAML: {str(exc).splitlines()[0]}", where=where) from None
    if isinstance(data, dict):
        data = data.get("steps")
    if not isinstance(data, list):
        raise InputError("a pipeline is a list of steps or a mapping with 'steps'", where=where)
    return data
