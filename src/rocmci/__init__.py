"""rocmci: build, run and validate vLLM's AMD (ROCm) CI around DeepEP."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rocmci")  # one source of truth: pyproject.toml's [project].version
except PackageNotFoundError:  # imported from a checkout that was never installed (tasks.py allows it)
    __version__ = "0+unknown"
