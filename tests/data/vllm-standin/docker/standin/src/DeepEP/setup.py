"""Stand-in for DeepEP's setup.py (tests only): DeepEP's arch rule, and a wheel whose extension lists
one code object per arch, the way roc-obj-ls would show a real one."""

import argparse
import os
import sys
import zipfile

ALLOWED = ("gfx942", "gfx950")  # as DeepEP's setup.py: these only; both when PYTORCH_ROCM_ARCH is unset

parser = argparse.ArgumentParser()
parser.add_argument("--variant", default="cuda")
parser.add_argument("--nic", default="cx7")
parser.add_argument("--rocm-explicit-ctx", action="store_true")
parser.add_argument("--rocm-gfx942-fp8-fnuz-max")
parser.add_argument("--dist-dir", default="dist")
args, rest = parser.parse_known_args()
raw = os.environ.get("PYTORCH_ROCM_ARCH", "").strip()
archs = [a for a in raw.replace(",", ";").split(";") if a.strip()] if raw else list(ALLOWED)
archs = [a for a in archs if a in ALLOWED]
if not archs:
    sys.exit(f"Invalid PYTORCH_ROCM_ARCH={raw!r}: DeepEP supports only {', '.join(ALLOWED)}")
ref = open(".standin-ref").read().strip()
os.makedirs(args.dist_dir, exist_ok=True)
wheel = os.path.join(args.dist_dir, "deep_ep-0.0.0-cp311-cp311-linux_x86_64.whl")
bundles = ["1\thost-x86_64-unknown-linux--\tfile://deep_ep_cpp.so#offset=0"]
bundles += [f"1\thipv4-amdgcn-amd-amdhsa--{a}\tfile://deep_ep_cpp.so#offset={n}" for n, a in enumerate(archs, 1)]
with zipfile.ZipFile(wheel, "w") as zf:
    zf.writestr(
        "deep_ep/__init__.py",
        f"ARCHS = {';'.join(archs)!r}\nNIC = {args.nic!r}\nREF = {ref!r}\n"
        f"EXPLICIT_CTX = {args.rocm_explicit_ctx!r}\nFP8_FNUZ_MAX = {args.rocm_gfx942_fp8_fnuz_max!r}\n",
    )
    zf.writestr("deep_ep_cpp.cpython-311-x86_64-linux-gnu.so", "\n".join(bundles) + "\n")
    zf.writestr("deep_ep-0.0.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: deep_ep\nVersion: 0.0.0\n")
print(f"standin: built DeepEP {ref} for {';'.join(archs)} (nic {args.nic})")
