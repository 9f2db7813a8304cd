"""image.build (issue 35): a builder that rejects a feature vLLM's Dockerfile uses is refused before the first
stage; `--dry-run` builds and pulls nothing; `--pull` pulls BASE_IMAGE only in a real build, before its first
stage; BASE_IMAGE is pinned by digest only when the engine holds a registry digest for it.

Real parts: `rocmci image.build` runs in process through program.main on vLLM's fixture Dockerfile.rocm; rocmci's
Engine talks HTTP through the real Docker SDK to a Docker-API stand-in on a unix socket (no engine runs in the unit
suite), and its docker client is a script that records every call and, as Docker 20.10's built-in BuildKit does,
answers a probe that uses `ADD --checksum` with BuildKit's parse error. docs/guards.md maps each test to the
mutation it was watched to kill.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from pathlib import Path

import pytest

from rocmci.engine import Engine
from rocmci.image import features, requests
from rocmci.image import vllm_dockerfile as vd
from tests.conftest import SHARED_VLLM
from tests.unit import test_mutants_cli as _cli
from tests.unit.test_guard_images import _Api, _UnixServer

_outside_any_workspace, rocmci = _cli._outside_any_workspace, _cli.rocmci  # fixtures

DOCKERFILE = SHARED_VLLM / "docker" / "Dockerfile.rocm"
pytestmark = [
    pytest.mark.skipif(not DOCKERFILE.is_file(), reason=f"{DOCKERFILE} not found"),
    pytest.mark.usefixtures("_outside_any_workspace"),
]
BASE = "rocm/vllm-dev:base"
ID = "sha256:" + "1" * 64
REGISTRY = "sha256:" + "2" * 64

# The client: every call on one line; a probe build with ADD --checksum fails as 20.10's BuildKit parser fails.
CLIENT = """#!/bin/bash
printf '%s\\n' "$*" >> "$CALLS"
if [ "$1" = build ] && [ -n "$REJECT" ] && grep -q -- "$REJECT" "${@: -1}/Dockerfile" 2>/dev/null; then
  echo "failed to solve: dockerfile parse error line 2: Unknown flag: ${REJECT#--}" >&2; exit 1
fi
case "$1" in --version|version) echo 'Docker version 20.10.24, build 297e128' ;; esac
exit 0
"""


class _Attrs(_Api):
    """The stand-in's image inspect with RepoDigests (a pulled image) or without (built or imported here)."""

    attrs: dict[str, dict] = {}

    def do_GET(self):  # noqa: N802 - http.server's name
        path = re.sub(r"^/v[0-9.]+", "", self.path.split("?")[0])
        m = re.fullmatch(r"/images/(.+)/json", path)
        if m and (ref := urllib.parse.unquote(m.group(1))) in self.attrs:
            return self._json(200, self.attrs[ref])
        if m:
            return self._json(404, {"message": f"No such image: {ref}"})
        return super().do_GET()


@pytest.fixture
def docker(tmp_path, monkeypatch):
    sock = tmp_path / "docker.sock"
    server = _UnixServer(str(sock), _Attrs)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    calls = tmp_path / "calls"
    client = tmp_path / "docker"
    client.write_text(CLIENT)
    client.chmod(0o755)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    monkeypatch.setenv("ROCMCI_DOCKER", str(client))
    monkeypatch.setenv("CALLS", str(calls))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no buildx plugin of this host's user
    _Attrs.attrs = {BASE: {"Id": ID, "RepoTags": [BASE], "RepoDigests": [f"{BASE}@{REGISTRY}"], "Config": {}}}
    yield lambda: calls.read_text().splitlines() if calls.exists() else []
    server.shutdown()
    server.server_close()


def stage_builds(calls: list[str]) -> list[str]:
    """The client calls that build a stage of vLLM's Dockerfile (not a one-instruction feature probe)."""
    return [c for c in calls if c.startswith("build") and "--target" in c.split()]


def test_a_builder_that_rejects_add_checksum_is_refused_before_the_first_stage(docker, rocmci, monkeypatch):
    """A real build (with or without --pull) is refused, exit 5; a dry run prints the plan and says the same in a
    `# preflight:` line (exit 0). Neither builds a stage or pulls."""
    monkeypatch.setenv("REJECT", "--checksum")
    lines = DOCKERFILE.read_text().splitlines()
    at = next(i for i, line in enumerate(lines, 1) if line.startswith("ADD --checksum"))
    refusal = rf"cannot build .*Dockerfile\.rocm: .*Dockerfile\.rocm:{at} uses ADD --checksum"
    for extra in ((), ("--dry-run",), ("--pull",)):
        code, out, err = rocmci("image.build", "--vllm-src", str(SHARED_VLLM), "--target", "ci_base", *extra)
        said = out if extra == ("--dry-run",) else err
        # the refusal, among notes (e.g. no ci-bake-rocm.sh in this tree: no published ci_base looked for)
        first = next((line for line in said.splitlines() if "cannot build" in line), "")
        assert re.search(refusal, first), out + err
        assert "this builder rejects it" in first and "Unknown flag: checksum" in first
        assert stage_builds(docker()) == [] and not any(c.startswith("pull") for c in docker()), extra
        if extra == ("--dry-run",):
            assert code == 0 and first.startswith("# preflight:"), out + err
        else:
            assert code == 5 and out == "" and "nothing was built" not in err, err


def test_a_builder_that_parses_everything_is_not_refused(docker, rocmci):
    code, out, err = rocmci("image.build", "--vllm-src", str(SHARED_VLLM), "--target", "ci_base", "--dry-run")
    assert code == 0, err
    probes = [c for c in docker() if c.startswith("build --network none -q ")]
    control = [c for c in probes if "-t rocmci-probe:buildkit" in c]
    assert len(control) == 1 and probes.index(control[0]) == 0  # the positive control first, once
    assert len(probes) == 3  # then RUN --mount and ADD --checksum, each probed once
    assert "dry run: image" in err and "nothing was built" in err


def test_a_dry_run_builds_and_pulls_nothing_even_with_pull(docker, rocmci):
    code, out, err = rocmci("image.build", "--vllm-src", str(SHARED_VLLM), "--target", "ci_base", "--dry-run", "--pull")
    assert code == 0, err
    assert stage_builds(docker()) == [] and not any(c.startswith(("pull", "push")) for c in docker())
    assert "--target ci_base" in out  # the command it would run is printed instead


def test_pull_pulls_base_image_before_the_first_stage_of_a_real_build(docker, rocmci):
    rocmci("image.build", "--vllm-src", str(SHARED_VLLM), "--target", "ci_base", "--pull")
    calls = docker()
    pulls = [i for i, c in enumerate(calls) if c.startswith("pull")]
    builds = [i for i, c in enumerate(calls) if c in stage_builds(calls)]
    assert [calls[i] for i in pulls] == [f"pull --quiet {BASE}"] and builds, calls
    assert pulls[0] < builds[0]
    without = len(calls)
    rocmci("image.build", "--vllm-src", str(SHARED_VLLM), "--target", "ci_base")
    assert not any(c.startswith("pull") for c in docker()[without:])


def test_base_image_is_pinned_only_by_a_registry_digest(docker, monkeypatch):
    from rocmci import settings

    s = settings.resolve(Path.cwd(), flags={"vllm_src": str(SHARED_VLLM)}, env={}, pyproject={})
    co = requests.checkout(s)
    pulled = requests.base_facts(s, co, Engine("docker"), resolve=True)
    assert (pulled.digest, pulled.pinnable) == (REGISTRY, True)
    # Built or imported here: the engine holds only its ID, which no registry has.
    _Attrs.attrs = {BASE: {"Id": ID, "RepoTags": [BASE], "RepoDigests": [], "Config": {}}}
    local = requests.base_facts(s, co, Engine("docker"), resolve=True)
    assert (local.digest, local.pinnable) == (ID, False)
    # A RepoDigest of another repository names another image's digest, not this one's.
    _Attrs.attrs = {BASE: {"Id": ID, "RepoTags": [BASE], "RepoDigests": [f"rocm/other@{REGISTRY}"], "Config": {}}}
    assert requests.base_facts(s, co, Engine("docker"), resolve=True).pinnable is False
    assert json.dumps(requests.base_facts(s, co, Engine("docker"), resolve=False)) == "null"


def test_a_flag_after_a_classic_one_is_still_a_need():
    text = "FROM scratch AS a\nCOPY --from=a --chown=1 --link x y\nADD --chown=1 --checksum=sha256:00 u /z\n"
    found = {u.feature: u.line for u in features.uses(vd.parse(text, path=Path("x"), display="x"))}
    assert found == {"COPY --link": 2, "ADD --checksum": 3}
