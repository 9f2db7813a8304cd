"""Run inside a retargeted image: deep_ep imports, and its code objects are exactly the expected gfx targets.

Usage: python3 /opt/rocmci/verify_deepep.py --expect 'gfx942;gfx950'
Prints one JSON line {"ok", "expected", "found", "libraries", "error", "rocshmem"}; exit 0 when DeepEP's match,
1 otherwise. "rocshmem" lists the targets of rocSHMEM's shared libraries under $ROCSHMEM_DIR (default
/opt/rocshmem) the same way, for the caller to judge ({"libraries": [], ...} when there are none to read).
Standard library only: it runs with the image's own python3. The offload bundles of DeepEP's extension
libraries are listed with ROCm's roc-obj-ls; a bundle ID reads like hipv4-amdgcn-amd-amdhsa--gfx942.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import os
import re
import shutil
import subprocess
import sys

BUNDLE = re.compile(r"amdgcn-amd-amdhsa-[\w-]*?-(gfx[0-9a-f]+)")
TOOL_PATHS = ("/opt/rocm/bin/roc-obj-ls", "/opt/rocm/llvm/bin/roc-obj-ls")


def extension_libraries(package_file: str) -> list[str]:
    package_dir = os.path.dirname(package_file)
    inside = glob.glob(os.path.join(package_dir, "**", "*.so"), recursive=True)
    beside = glob.glob(os.path.join(os.path.dirname(package_dir), "deep_ep_cpp*.so"))
    return sorted(set(inside + beside))


def targets_of(tool: str, library: str) -> set[str]:
    done = subprocess.run([tool, library], capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{tool} {library} exited {done.returncode}: {done.stderr.strip()[-200:]}")
    return set(BUNDLE.findall(done.stdout))


def rocshmem_targets(tool: str) -> dict:
    root = os.environ.get("ROCSHMEM_DIR") or "/opt/rocshmem"
    libraries = sorted(set(glob.glob(os.path.join(root, "lib*", "**", "*.so*"), recursive=True)))
    answer: dict = {"dir": root, "libraries": libraries, "found": [], "error": None}
    try:
        for library in libraries:
            answer["found"] = sorted(set(answer["found"]) | targets_of(tool, library))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        answer["error"] = str(exc)
    return answer


def verify(expected: list[str]) -> dict:
    result: dict = {"ok": False, "expected": expected, "found": [], "libraries": [], "error": None}
    try:
        module = importlib.import_module("deep_ep")
    except Exception as exc:  # any import failure is the finding
        result["error"] = f"import deep_ep failed: {type(exc).__name__}: {exc}"
        return result
    libraries = extension_libraries(module.__file__ or "")
    result["libraries"] = libraries
    if not libraries:
        result["error"] = f"no extension library next to {module.__file__}"
        return result
    tool = shutil.which("roc-obj-ls") or next((p for p in TOOL_PATHS if os.path.exists(p)), None)
    if tool is None:
        result["error"] = "roc-obj-ls not found (ROCm's /opt/rocm/bin)"
        return result
    found: set[str] = set()
    try:
        for library in libraries:
            found |= targets_of(tool, library)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        result["error"] = str(exc)
        return result
    result["found"] = sorted(found)
    result["rocshmem"] = rocshmem_targets(tool)
    result["ok"] = sorted(found) == expected
    if not result["ok"]:
        result["error"] = f"code objects are for {sorted(found) or 'nothing'}, expected {expected}"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--expect", required=True, help="gfx targets, ';'-separated")
    args = parser.parse_args(argv)
    expected = sorted({a for a in re.split(r"[;,\s]+", args.expect) if a})
    result = verify(expected)
    print(json.dumps(result, sort_keys=True))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
