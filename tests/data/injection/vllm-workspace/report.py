"""What the workload saw, printed raw (as a workload's own logging would) and as JSON for the test to parse."""

import hashlib
import json
import os


def report(argv, **more):
    for i, arg in enumerate(argv):
        print(f"injection argv[{i}]={arg}")
    for name in sorted(os.environ):
        print(f"injection env {name}={os.environ[name]}")
        print(f"injection sha256 {name} {hashlib.sha256(os.environ[name].encode()).hexdigest()}")
    print("injection report: " + json.dumps({"argv": list(argv), "env": dict(os.environ), **more}), flush=True)
