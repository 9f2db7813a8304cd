"""The faces: invoke tasks (cli/tasks.py), the `rocmci` program (cli/program.py), flag parsing (cli/flags.py)."""
