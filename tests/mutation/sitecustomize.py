"""Child side of the mutation relay (see mutation_relay.py, the pytest side, for the whole design).

Python imports this module when it starts with this folder on PYTHONPATH, which only `nox -s mutants`
arranges. In a child process of a test in mutmut's stats phase (MUTANT_UNDER_TEST=stats, MUTATION_RELAY
naming the relay file), the trampoline's `record_trampoline_hit` is replaced by one that appends each
function's name, once, to that file; the test's pytest process adds them to that test's hits. Any other
process (a normal run, mutmut's mutant phase, a child with a scrubbed environment) only reads two variables.
"""

import os


def _relay_hits(path: str) -> None:
    # The trampolines call `record_trampoline_hit` as a global of this module, so replacing it here reaches
    # all of them. mutmut's own version needs its config, read from the current folder, where a child
    # (which runs in a test's folder) does not find it.
    import mutmut.mutation.trampoline as trampoline

    seen: set[str] = set()

    def relay(name: str, caller: str | None = None) -> None:
        # Written at the first hit, not at exit: a child killed by a signal (the SIGINT and timeout tests)
        # still reports what it reached. One short append per function keeps lines whole. A write that
        # fails (a test limits the child's file size to fake a full disk) loses the hit, never the child's
        # own behaviour.
        if name not in seen:
            seen.add(name)
            try:
                with open(path, "a", encoding="utf-8") as out:
                    out.write(name + "\n")
            except OSError:
                pass

    trampoline.record_trampoline_hit = relay


if os.environ.get("MUTANT_UNDER_TEST") == "stats" and os.environ.get("MUTATION_RELAY"):
    _relay_hits(os.environ["MUTATION_RELAY"])
