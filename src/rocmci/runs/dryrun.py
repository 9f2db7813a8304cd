"""What `--dry-run` of a run task prints: the preflight warnings, then each exact command (docker run, or
the host process and its environment). Secrets given with --env show by name only."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from rocmci.engine import Engine
from rocmci.runs import container as ctr
from rocmci.secrets import is_secret

if TYPE_CHECKING:
    from rocmci.runs.execute import Prepared, RunOptions


def dry_run_lines(prepared: Prepared, engine: Engine | None, opts: RunOptions | None = None) -> list[str]:
    from rocmci.report import shell_lines

    client = "docker"
    if engine is not None:
        try:
            client = engine.client
        except Exception:  # noqa: BLE001 - a dry run must print even without a docker client
            client = "docker"
    lines = [_comment(f"preflight: {w}") for w in prepared.warnings]
    lines += [_comment(n) for n in prepared.notes]
    for planned in prepared.runs:
        workload = planned.workload
        gpu_text = ", ".join(f"{g.index}:{g.arch}" for g in planned.gpus) or "none detected"
        lines.append(_comment(f"{workload.name} on GPUs [{gpu_text}]: {workload.command_line()}"))
        if workload.workarounds:
            lines.append(_comment(f"workarounds from the registry: {', '.join(workload.workarounds)}"))
        if planned.spec is not None:
            lines.append(shell_lines(ctr.run_argv(planned.spec, client)))
            continue
        visible = planned.env.get("ROCR_VISIBLE_DEVICES")
        if visible is not None:
            lines.append(
                f"# host process: GPUs {visible} visible (ROCR_VISIBLE_DEVICES={visible}; HIP sees them from 0)"
            )
        secrets = sorted(k for k in (opts.env if opts else {}) if is_secret(k))
        if secrets:
            lines.append(f"# plus from --env, values not shown: {', '.join(secrets)}")
        if opts is not None:
            lines.append(f"cd {shlex_quote(opts.workdir)}")
        argv = ["env", *(f"{k}={v}" for k, v in planned.env.items()), *workload.argv]
        lines.append(shell_lines(argv))
    return lines


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _comment(text: str) -> str:
    """A shell comment that stays one line whatever the text holds: pasted, it runs nothing."""
    return "# " + _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
