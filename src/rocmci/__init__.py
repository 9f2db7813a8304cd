"""rocmci: build, run and validate vLLM's AMD (ROCm) CI around DeepEP."""

__version__ = "0.1.0"
