"""The reference of the generate row: ci-infra's own render of a step file, as bootstrap-amd.sh makes it.

Renders buildkite/test-template-amd.j2 with minijinja (the Rust engine of minijinja-cli, through its
Python binding) for a run_all build on main, and writes the pipeline to stdout: the work
`pipeline.generate --run-all` does, minus validation. Usage: ci_infra_render.py TEMPLATE STEP_FILE
"""

import sys
from pathlib import Path

from rocmci.pipeline import citemplate
from rocmci.pipeline.bootstrap import TemplateInputs

template, steps = (Path(a) for a in sys.argv[1:3])
inputs = TemplateInputs(run_all="1", list_file_diff="run_all", branch="main")
sys.stdout.write(citemplate.render_ci_infra(template, steps, inputs))
