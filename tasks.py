"""`invoke --list`: rocmci's tasks. The collection lives in the package (rocmci/cli/tasks.py), so the
installed `rocmci` command offers the same tasks; this file only exposes it to invoke."""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("rocmci") is None:
    sys.path.insert(0, str(Path(__file__).parent / "src"))  # usable from a checkout without installing

from rocmci.cli.tasks import ns  # noqa: E402

__all__ = ["ns"]
