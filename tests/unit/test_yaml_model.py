"""The one YAML model (pipeline/scalars.py): step file -> template paste -> buildkite-agent.

Values whose meaning changes between the step file and the uploaded pipeline are generated as the real
chain makes them (compared with ci-infra's template rendered by minijinja, read as the agent reads it),
reported with what the CI receives, and never make rocmci write invalid JSON or grow in memory.
The agent-side tables come from gopkg.in/yaml.v3's resolve.go and go-pipeline's ordered decoder
(README "How values are read").
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ruamel.yaml import YAML

from rocmci import yamldoc
from rocmci.pipeline import bootstrap, citemplate, conformance, emit, generate, rules, scalars, source, validate
from rocmci.pipeline.inventory import load_inventory
from tests.conftest import REPO

TEMPLATE = REPO.parent / "shared" / "fixtures" / "ci-infra" / "buildkite" / "test-template-amd.j2"
CTX = rules.Context(load_inventory(REPO / ".buildkite" / "agents.yaml"), ("gfx942",))
INPUTS = bootstrap.decide(bootstrap.Request(changed=("csrc/x.cu",), branch="main", run_all=True)).inputs


@pytest.mark.parametrize(
    ("text", "agent"),
    [
        ("yes", "yes"),  # yaml.v3: only true/false are booleans
        ("Off", "Off"),
        ("on", "on"),
        ("0777", 511),  # a leading 0 is octal in yaml.v3 (ParseInt base 0)
        ("010", 8),
        ("0100", 64),
        ("08", 8.0),  # not octal, but a float by yamlStyleFloat
        ("1:30", "1:30"),  # no sexagesimal
        ("2024-01-01", "2024-01-01"),  # a timestamp decoded into `any` stays text
        ("1_000", 1000),
        ("0b101", 5),
        ("0x1F", 31),
        ("=", "="),
        ("", None),
        ("~", None),
        ("9" * 5000, "9" * 5000),  # every Go number parse overflows: text, and no int('9' * 5000)
    ],
)
def test_agent_reads_plain_scalars_as_yaml_v3(text, agent):
    assert scalars.agent_scalar(text) == agent
    assert type(scalars.agent_scalar(text)) is type(agent)


def test_agent_non_finite_floats_and_go_printing():
    assert math.isnan(scalars.agent_scalar(".nan"))
    assert scalars.agent_scalar("-.inf") == -math.inf
    # fmt.Sprint of the decoded value: what an env value or a command becomes
    assert [scalars.plain_string(t) for t in (".nan", ".inf", "1e3", "1.50", "true", "1e21", "0.00001")] == [
        "NaN", "+Inf", "1000", "1.5", "true", "1e+21", "1e-05"
    ]  # fmt: skip
    assert scalars.plain_key("0x1F") == "31" and scalars.plain_key("1.0") == "1.000000e+00"


def test_the_step_file_is_read_as_serde_yaml_reads_it():
    data = yamldoc.parse("a: 0100\nb: -007\nc: 0b101\nd: -0x1F\ne: 1e400\nf: 00.5\ng: 0\nh: yes\n", "f").data
    assert data == {"a": "0100", "b": "-007", "c": 5, "d": -31, "e": "1e400", "f": 0.5, "g": 0, "h": "yes"}


def test_minijinja_compares_kinds_first():
    assert not scalars.jinja_le("0100", 180) and scalars.jinja_le(100, 180) and not scalars.jinja_le(math.nan, 180)


# ------------------------------------------------------------------ against the real template

ODD = """\
steps:
- label: odd timeout
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  timeout_in_minutes: 0100
  commands: [pytest -v]
- label: odd values
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  no_plugin: true
  commands: ["on"]
  env:
    A: yes
    B: "0777"
    C: 2024-01-01
    D: .nan
    E:
    F: "="
    G: 1:30
    H: 010
    I: 1.0
- label: odd parallelism
  agent_pool: mi300_1
  mirror_hardwares: [amdproduction]
  parallelism: "010"
  commands: [pytest -v]
"""


def every_step(path: Path) -> source.SourceFile:
    """The file with every step generated, whatever its types: the template renders them all."""
    src = source.load_source(path, path.name)
    steps = [source.SourceStep(i, raw, src.doc.where(("steps", i))) for i, raw in enumerate(src.doc.data["steps"])]
    return source.SourceFile(doc=src.doc, steps=steps, findings=src.findings, step_findings=src.step_findings)


@pytest.fixture
def odd_file(tmp_path) -> Path:
    path = tmp_path / "odd.yaml"
    path.write_text(ODD)
    return path


@pytest.mark.skipif(not TEMPLATE.is_file(), reason=f"{TEMPLATE} not found")
def test_odd_values_are_generated_as_the_real_template_renders_them(odd_file):
    reference = citemplate.parse_pipeline(citemplate.render_ci_infra(TEMPLATE, odd_file, INPUTS), "render")
    generated = generate.generate(every_step(odd_file), generate.Options(inputs=INPUTS, origin_env=False))
    written = emit.dump(generated.pipeline)
    ours = citemplate.parse_pipeline(written, "rocmci")
    comparison = conformance.compare(reference, ours)
    assert not comparison.unexpected, comparison.summary(examples=10)
    steps = {s.get("label"): s for _, s in conformance.flatten_steps(ours)}
    assert steps["mi300_1: odd timeout"]["timeout_in_minutes"] == 180  # "0100" is text: the cap applies
    odd = steps["mi300_1: odd values"]
    assert odd["command"] == "on"
    assert odd["env"] == {"A": "yes", "B": "511", "C": "2024-01-01", "D": "NaN", "E": "none", "F": "=",
                          "G": "1:30", "H": "8", "I": "1"}  # fmt: skip
    assert steps["mi300_1: odd parallelism"]["parallelism"] == 8


def test_odd_values_get_findings_saying_what_the_ci_receives(odd_file):
    src = every_step(odd_file)
    generated = generate.generate(src, generate.Options(inputs=INPUTS))
    report = validate.validate_generated(src, generated, CTX)
    meaning = [f.message for f in report.findings if f.rule == "yaml-meaning"]
    assert any("timeout_in_minutes '0100'" in m and "receives timeout_in_minutes 180" in m for m in meaning), meaning
    assert any("env B '0777'" in m and "receives '511'" in m for m in meaning), meaning
    assert any("env E ''" in m and "receives 'none'" in m for m in meaning), meaning
    assert any("parallelism '010'" in m and "receives '8'" in m for m in meaning), meaning
    assert not any("env A" in m or "env C" in m or "env F" in m or "env G" in m for m in meaning), meaning
    assert not [f for f in report.findings if f.rule == "template-escape"], "'=' or 'on' is not an escape problem"
    assert not any("is not array or string" in f.message for f in report.findings)


def test_json_output_is_strict_json(odd_file):
    generated = generate.generate(every_step(odd_file), generate.Options(inputs=INPUTS))
    from rocmci.pipeline import service

    text = service.render(generated.pipeline, "json", "odd.yaml")

    def refuse(name):
        raise AssertionError(f"{name} is not JSON")

    assert json.loads(text, parse_constant=refuse) == generated.pipeline


# ------------------------------------------------------------------ the writer: reads back the same everywhere

AWKWARD = ["yes", "No", "on", "y", "~", "null", "0777", "010", "1:30", "2024-01-01", ".nan", "=", "<<", "",
           " lead", "trail ", "a: b", "#x", "a #b", "- x", "[x]", "{x}", "&a", "*a", "!t", "%x", "@x", "`x",
           "'q'", '"q"', "x\ny", "tab\tx", "nel\x85x", "ls\u2028x", "bom\ufeffx", "del\x7fx", "é", "😀", "a,b",
           "$BUILDKITE_COMMIT", "1e3", "0x1F", "+1", "-1", ".5", "1.", "True", "FALSE", "Null", "?x", "|x",
           ">x"]  # fmt: skip


def test_the_writer_reads_back_identically_under_every_reader():
    data = {"steps": [{"label": t, "env": {t or "k": t}, "n": [1, -2, 1.5, 1e20, True, None, [], {}, [t]]}
                      for t in AWKWARD]}  # fmt: skip
    text = emit.dump(data)
    assert yaml.safe_load(text) == data
    assert YAML(typ="safe", pure=True).load(text) == data
    assert yamldoc.parse(text, "w").data == data
    # buildkite-agent: untyped fields keep their values, string fields (env, label) stay these strings
    agent = scalars.read_pipeline(text, "w").data
    assert agent == data


# ------------------------------------------------------------------ bounded: an alias bomb pasted by the template

BOMB = "[&a [lol,lol,lol,lol,lol,lol,lol,lol,lol],&b [*a,*a,*a,*a,*a,*a,*a,*a,*a],&c [*b,*b,*b,*b,*b,*b,*b,*b,*b],&d [*c,*c,*c,*c,*c,*c,*c,*c,*c],&e [*d,*d,*d,*d,*d,*d,*d,*d,*d],&f [*e,*e,*e,*e,*e,*e,*e,*e,*e],&g [*f,*f,*f,*f,*f,*f,*f,*f,*f],&h [*g,*g,*g,*g,*g,*g,*g,*g,*g],&i [*h,*h,*h,*h,*h,*h,*h,*h,*h]]"  # noqa: E501
BAD = REPO / "tests" / "data" / "bad" / "source"


def _limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))


@pytest.mark.parametrize("case", ["alias-bomb-no-plugin-command.yaml", "alias-bomb-no-plugin-env.yaml"])
@pytest.mark.parametrize(
    "task",
    [["pipeline.validate", "--source"], ["pipeline.generate", "--run-all", "--source"], ["pipeline.plan", "--source"]],
)
def test_an_alias_bomb_pasted_by_the_template_stays_small(case, task, tmp_path):
    """Under a 1 GB address-space limit every pipeline task answers: a finding or one line, never an OOM."""
    out = tmp_path / "pipeline.yaml"
    argv = [sys.executable, "-m", "invoke", "--search-root", str(REPO), *task, str(BAD / case)]
    if task[0] == "pipeline.generate":
        argv += ["--out", str(out), "--keep-going"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, preexec_fn=_limit_address_space)
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-2000:]
    if task[0] == "pipeline.validate":
        assert "becomes a list once pasted by the template" in done.stdout, done.stdout
    if task[0] == "pipeline.generate":
        assert out.stat().st_size < 200_000  # the bomb is held as its text, never expanded


@pytest.mark.skipif(not TEMPLATE.is_file(), reason=f"{TEMPLATE} not found")
def test_pipeline_diff_reads_the_pasted_bomb_through_the_bounded_reader(tmp_path):
    argv = [sys.executable, "-m", "invoke", "--search-root", str(REPO), "pipeline.diff", "--template", str(TEMPLATE),
            "--run-all", "--source", str(BAD / "alias-bomb-no-plugin-command.yaml")]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, preexec_fn=_limit_address_space)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "YAML aliases expand to more than" in done.stderr and "Traceback" not in done.stderr


def test_the_bomb_files_are_the_small_ones_issue_22_describes():
    for case in ("alias-bomb-no-plugin-command.yaml", "alias-bomb-no-plugin-env.yaml"):
        text = (BAD / case).read_text()
        assert BOMB in text and len(text.encode()) < 600
