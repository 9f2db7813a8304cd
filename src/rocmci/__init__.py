"""rocmci: build, run and validate vLLM's AMD (ROCm) CI around DeepEP."""


def __getattr__(name: str) -> str:
    # Looked up on first use only: importlib.metadata costs start-up time that validation runs never need.
    if name != "__version__":
        raise AttributeError(name)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rocmci")  # one source of truth: pyproject.toml's [project].version
    except PackageNotFoundError:  # imported from a checkout that was never installed (tasks.py allows it)
        return "0+unknown"
