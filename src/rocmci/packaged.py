"""Files rocmci ships inside its package (src/rocmci/data/docker), found beside this module: the same paths in
the source tree, an editable install and an installed wheel.

- OVERLAY: image.retarget's Dockerfile; DOCKER is its build context (it COPYs retarget/verify_deepep.py).
- VERIFIER: the code-object verifier run inside an image (after image.build and image.retarget, and by the
  run preflight's probe of an unlabelled image).

A leaf: imports nothing of rocmci, so any layer (image/, runs/) may read it.
"""

from __future__ import annotations

from pathlib import Path

DOCKER = Path(__file__).resolve().parent / "data" / "docker"
OVERLAY = DOCKER / "Dockerfile.retarget"
VERIFIER = DOCKER / "retarget" / "verify_deepep.py"
# The workaround registry used when the workspace names none.
WORKAROUNDS = Path(__file__).resolve().parent / "data" / "workarounds.yaml"
