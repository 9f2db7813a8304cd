"""When Python's cyclic garbage collector may run, for the short pipeline processes.

Pipeline work (loading a step file, generating, validating, writing YAML) allocates many small objects
that form no cycles: a collection pass over them frees nothing and costs time, both while the work runs
and once more over the whole heap when the interpreter exits. Long-running tasks (builds, runs) keep the
collector as Python sets it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_gc() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's previous state is restored after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def skip_final_collection() -> None:
    """At exit the interpreter runs one last cyclic collection over every live object, the whole pipeline
    included (about 30 ms of CPU for vLLM's file), though pipeline work makes no cycles. Freezing the heap
    from an exit handler (they run before that collection) leaves it nothing to scan; the objects are freed
    by reference counting as before. Registered once per process."""
    global _FREEZE_REGISTERED
    if not _FREEZE_REGISTERED:
        import atexit

        atexit.register(gc.freeze)
        _FREEZE_REGISTERED = True


_FREEZE_REGISTERED = False
