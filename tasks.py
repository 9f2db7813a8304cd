"""Everyday commands: `invoke --list`. Each task parses its flags and calls rocmci once."""

from __future__ import annotations

import sys
from pathlib import Path

from invoke import Collection, Exit, task

sys.path.insert(0, str(Path(__file__).parent / "src"))  # usable from a checkout without installing


def call(name: str, **kwargs):
    from rocmci import commands
    from rocmci.errors import RocmciError

    try:
        code = getattr(commands, name)(**kwargs)
    except RocmciError as exc:
        raise Exit(f"rocmci: {exc.one_line()}", code=exc.exit_code) from None
    except KeyboardInterrupt:
        raise Exit("rocmci: interrupted", code=130) from None
    if code:
        raise Exit(code=code)


@task(help={"json": "print JSON instead of a table"})
def settings(c, json=False):
    """Show every setting, its value and where it came from (default, Dockerfile, pyproject, env, flag)."""
    call("show_settings", as_json=json)


@task(
    help={
        "for": "exit non-zero when something this task needs is missing: build, run or pipeline",
        "json": "print JSON instead of a table",
        "host_root": "read /sys and /dev below this folder instead of / (for fake device trees)",
    }
)
def doctor(c, for_=None, json=False, host_root="/"):
    """What this host can do: Docker engine, BuildKit, /dev/kfd, GPUs and archs, disk, the image."""
    call("doctor", purpose=for_, as_json=json, kfd_root=host_root)


ns = Collection(settings, doctor)
