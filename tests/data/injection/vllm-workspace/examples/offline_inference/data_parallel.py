"""Stand-in for vLLM's DP example: reports its argv and environment, then succeeds."""

import os
import sys

sys.path.insert(0, os.getcwd())
from report import report  # noqa: E402

report(sys.argv)
