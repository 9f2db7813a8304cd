"""The verifier's answer (packaged.VERIFIER, retarget/verify_deepep.py): the last line of its output that is JSON.

One reading for both of its callers, retarget's check of a built image (image/retarget.py) and the
run preflight's probe of an image's code objects (runs/images.py). A leaf: imports nothing of rocmci.
"""

from __future__ import annotations

import json


def answer(stdout: str) -> dict | None:
    """The verifier's result, or None when it printed none (crashed, or printed something else last)."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None
    return result if isinstance(result, dict) else None
