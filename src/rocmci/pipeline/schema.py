"""Buildkite's official pipeline schema, as check-jsonschema ships it (builtin 'vendor.buildkite').

A compiled validator (jsonschema-rs) answers "is it valid?" for the whole document in well under a
millisecond; only the steps it rejects are diagnosed again with jsonschema, whose error tree lets us
name the real offending key instead of "is not valid under any of the given schemas".
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from rocmci.errors import InputError

# Which definition a step is checked against, by the key that says what it is.
KIND_DEFINITIONS = {
    "block": "blockStep",
    "input": "inputStep",
    "wait": "waitStep",
    "waiter": "waitStep",
    "trigger": "triggerStep",
    "group": "groupStep",
}


def schema_path() -> Path:
    # find_spec does not import the package (and its CLI dependencies): only the data file is needed.
    spec = importlib.util.find_spec("check_jsonschema")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("check-jsonschema is not installed", hint="pip install check-jsonschema")
    return Path(next(iter(spec.submodule_search_locations))) / "builtin_schemas" / "vendor" / "buildkite.json"


@cache
def schema() -> dict[str, Any]:
    return json.loads(schema_path().read_text(encoding="utf-8"))


@cache
def _fast_validator():
    import jsonschema_rs

    return jsonschema_rs.Draft7Validator(schema())


@cache
def _definition_validator(name: str):
    import jsonschema

    return jsonschema.Draft7Validator({"$ref": f"#/definitions/{name}", "definitions": schema()["definitions"]})


def is_valid(document: dict[str, Any]) -> bool:
    return _fast_validator().is_valid(document)


def _definition_for(step: dict[str, Any]) -> str:
    for key, name in KIND_DEFINITIONS.items():
        if key in step:
            return name
    return "commandStep"


def _properties(name: str) -> list[str]:
    return list(schema()["definitions"][name].get("properties", {}))


def diagnose_step(step: Any, path: tuple) -> Iterator[tuple[tuple, str]]:
    """(path, message) for each thing wrong with one step."""
    if not isinstance(step, dict):
        if isinstance(step, str):
            yield path, f"{step!r} is not a step; the only string steps are 'wait', 'block' and 'input'"
        else:
            yield path, f"a step must be a mapping, got {type(step).__name__}"
        return
    name = _definition_for(step)
    allowed = _properties(name)
    kind = name.removesuffix("Step")
    unknown = [k for k in step if k not in allowed]
    for key in unknown:
        import difflib  # only when a name is unknown: its import is a cost on every start
        close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        yield (*path, key), f"{key!r} is not a {kind} step key{hint}"
    known = {k: v for k, v in step.items() if k in allowed}
    import jsonschema

    for error in _definition_validator(name).iter_errors(known):
        if error.validator == "additionalProperties" and not error.absolute_path:
            continue
        best = jsonschema.exceptions.best_match([error])
        where = (*path, *best.absolute_path)
        field = ".".join(str(p) for p in best.absolute_path) or kind
        message = _explain(best)
        yield where, f"{field}: {message if len(message) <= 200 else message[:197] + '...'}"


def _explain(error) -> str:
    """For anyOf/oneOf, say which types would do instead of "not valid under any of the given schemas"."""
    if error.validator not in ("anyOf", "oneOf"):
        return error.message
    wanted: list[str] = []
    for sub in error.context:
        if sub.validator == "type" and not sub.relative_path:
            for name in [sub.validator_value] if isinstance(sub.validator_value, str) else sub.validator_value:
                if name not in wanted:
                    wanted.append(name)
        elif sub.validator == "enum" and not sub.relative_path:
            wanted.append("one of " + ", ".join(map(repr, sub.validator_value)))
    if not wanted:
        return error.message
    return f"{error.instance!r} is not {' or '.join(wanted)}"


def diagnose(document: dict[str, Any]) -> Iterator[tuple[tuple, str]]:
    """(path, message) for every schema violation; call only when is_valid() said no."""
    for error in _fast_validator().iter_errors(document):
        path = tuple(error.instance_path)
        target: Any = document
        for part in path:
            target = target[part]
        is_step = len(path) >= 2 and path[-2] == "steps" and isinstance(path[-1], int)
        if is_step:
            found = list(diagnose_step(target, path))
            if found:
                yield from found
                continue
        yield path, error.message
