"""What `--dry-run` of a run task prints: the preflight warnings, then each exact command (docker run, or
the host process and its environment).

Redaction works on values, before any shell quoting: an --env value shows as NAME=*** whatever characters
it holds, and no other word of the command changes because it happens to equal a short --env value
(`--env MYX=host` leaves `--network host` alone). Secrets given with --env reach docker by name only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rocmci.engine import Engine
from rocmci.runs import container as ctr
from rocmci.runs.types import Prepared, RunOptions
from rocmci.secrets import Redactor, is_secret, secret_kind

MASK = "***"
# A given (--env) value this long is masked anywhere in a command word; a shorter one only as the value
# of its own NAME=value: short values are ordinary words ("host", "1") far more often than secrets.
MIN_FREE_MASK = 8


class ValueRedactor:
    """Redaction of one command word at a time, for commands that are printed (never for what runs)."""

    def __init__(self, opts: RunOptions | None, environ) -> None:
        given = {} if opts is None else {k: v for k, v in opts.env.items() if k not in opts.public}
        public = frozenset() if opts is None else opts.public
        self.given = given
        self.text = Redactor(environ, public=public)  # known secrets of the environment, secret shapes
        # A secret (by name or shape) is masked in any word however short, as the run's own redactor does.
        free = [v for k, v in given.items() if len(v) >= MIN_FREE_MASK or is_secret(k) or secret_kind(v)]
        self._long = Redactor(values=free)

    def assignment(self, item: str) -> str:
        name, sep, value = item.partition("=")
        if sep and name in self.given:
            return f"{name}={MASK}"
        return self.word(item)

    def word(self, item: str) -> str:
        return self.text(self._long(item))

    def argv(self, argv: Sequence[str]) -> list[str]:
        out = []
        after_env = False
        for item in argv:
            out.append(self.assignment(item) if after_env else self.word(item))
            after_env = item in ("--env", "-e")
        return out


def dry_run_lines(prepared: Prepared, engine: Engine | None, opts: RunOptions | None = None, environ=None) -> list[str]:
    import os

    from rocmci.report import shell_lines

    redact = ValueRedactor(opts, os.environ if environ is None else environ)
    client = _client(engine)
    lines = [_comment(redact.word(f"preflight: {w}")) for w in prepared.warnings]
    lines += [_comment(redact.word(n)) for n in prepared.notes]
    for planned in prepared.runs:
        workload = planned.workload
        lines += [_comment(redact.word(line)) for line in workload.about]
        gpu_text = ", ".join(f"{g.index}:{g.arch}" for g in planned.gpus) or "none detected"
        command = " ".join(redact.argv(workload.argv)) if workload.kind == "step" else workload.command_line()
        lines.append(_comment(redact.word(f"{workload.name} on GPUs [{gpu_text}]: {command}")))
        if workload.workarounds:
            lines.append(_comment(f"workarounds from the registry: {', '.join(workload.workarounds)}"))
        if planned.shown:
            # The job's env as the agent hands it to the runner (the step's own env is listed above).
            lines.append("# job env:")
            lines += [_comment(f"  {redact.assignment(f'{k}={v}')}") for k, v in planned.env.items()]
            lines.append(shell_lines(redact.argv(planned.shown)))
            continue
        if planned.spec is not None:
            lines.append(shell_lines(redact.argv(ctr.run_argv(planned.spec, client))))
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
        env_words = [redact.assignment(f"{k}={v}") for k, v in planned.env.items()]
        lines.append(shell_lines(["env", *env_words, *(redact.word(a) for a in workload.argv)]))
    return lines


def dry_run_json(prepared: Prepared, engine: Engine | None, opts: RunOptions | None = None, environ=None) -> dict:
    """What --dry-run --json prints: the same commands as words, redacted as the text form is."""
    import os

    redact = ValueRedactor(opts, os.environ if environ is None else environ)
    client = _client(engine)
    runs = []
    for planned in prepared.runs:
        if planned.shown:
            argv = list(planned.shown)
        elif planned.spec is not None:
            argv = ctr.run_argv(planned.spec, client)
        else:
            argv = list(planned.workload.argv)
        runs.append(
            {
                "name": redact.word(planned.workload.name),
                "gpus": [g.index for g in planned.gpus],
                "argv": redact.argv(argv),
                "env": [redact.assignment(f"{k}={v}") for k, v in planned.env.items()],
            }
        )
    return {
        "dry_run": True,
        "warnings": [redact.word(w) for w in prepared.warnings],
        "notes": [redact.word(n) for n in prepared.notes],
        "runs": runs,
    }


def _client(engine: Engine | None) -> str:
    """The docker client a dry run names; "docker" when there is none (a dry run prints all the same)."""
    if engine is not None:
        try:
            return engine.client
        except Exception:  # noqa: BLE001 - a dry run must print even without a docker client
            pass
    return "docker"


def _comment(text: str) -> str:
    """A shell comment that stays one line whatever the text holds: pasted, it runs nothing. Control, bidi and
    line-separating characters (report.UNSAFE_ON_ONE_LINE) are shown as escapes, so the comment reads in its
    order on the terminal."""
    from rocmci.report import UNSAFE_ON_ONE_LINE

    def escaped(m: re.Match) -> str:
        c = ord(m.group())
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return "# " + UNSAFE_ON_ONE_LINE.sub(escaped, text)


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
