"""Reports pytest's own argv, the -k expression and --injection-note exactly as received."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from report import report  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--injection-note", default=None, help="any text; reported back verbatim")


def pytest_configure(config):
    keyword = config.option.keyword
    report(list(config.invocation_params.args), keyword=keyword, note=config.getoption("--injection-note"))
    # A payload is not a valid -k expression, so pytest would stop with a usage error. Whether the text
    # arrived literally is what is tested; what pytest then does with it is pytest's business.
    config.option.keyword = ""
