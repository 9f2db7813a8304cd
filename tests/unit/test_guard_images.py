"""vLLM's images (issue 35): labels read (the DeepEP archs of CI images), `--dry-run` pulls nothing, an image's
files copied below the scratch folder only (src/rocmci/runs/images.py). docs/guards.md maps each test to the
mutation it was watched to kill.

Real components: vLLM's own ci-bake-rocm.sh (../shared/fixtures) writes the labels its CI images carry, from
vLLM's real Dockerfile.rocm; the Docker SDK and rocmci's Engine talk HTTP to a Docker-API stand-in on a unix
socket (no engine runs in the unit suite) and run a stand-in docker client that records what it is asked;
real tar streams, in the format `docker cp` writes.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import re
import socketserver
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest

from rocmci import labels as label
from rocmci.engine import Engine
from rocmci.runs import images
from tests.conftest import SHARED_VLLM

BAKE = SHARED_VLLM / "buildkite" / "scripts" / "ci-bake-rocm.sh"
DOCKERFILE = SHARED_VLLM / "docker" / "Dockerfile.rocm"

# --- labels: the DeepEP archs of vLLM's CI images -------------------------------------------------------------


def bake_labels(tmp_path: Path, **env: str) -> dict[str, str]:
    """The labels vLLM's ci-bake-rocm.sh gives a ci_base image built from vLLM's Dockerfile.rocm: its own
    ci_base_metadata_pairs and write_ci_base_metadata_labels, sourced and run (the base image's digest, which
    it would ask a registry for, given as already resolved)."""
    script = (
        f'source "{BAKE}"\n'
        "BASE_IMAGE_DIGEST_CACHE_READY=1 BASE_IMAGE_DIGEST_CACHE_REF=rocm/vllm-dev:base\n"
        "BASE_IMAGE_DIGEST_CACHE_VALUE=sha256:" + "0" * 64 + "\n"
        'write_ci_base_metadata_labels "$(ci_base_metadata_pairs)"\n'
    )
    base = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "CI_BASE_DOCKERFILE": str(DOCKERFILE)}
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env={**base, "CI_BASE_CONTENT_FILES": " ", **env},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    pairs = re.findall(r'^ {4}"((?:[^"\\]|\\.)*)" = "((?:[^"\\]|\\.)*)"$', done.stdout, re.M)
    assert pairs, done.stdout + done.stderr
    return {k: re.sub(r"\\(.)", r"\1", v) for k, v in pairs}


DECLARED = ", declared: no rocmci.evidence.deepep-arch (code objects not verified)"

@pytest.mark.skipif(not BAKE.is_file(), reason=f"{BAKE} not found (the shared fixtures sit beside the repo)")
def test_the_deepep_archs_are_read_from_the_labels_vllms_ci_writes(tmp_path):
    ci = bake_labels(tmp_path)
    assert 'ARG DEEPEP_ROCM_ARCH="gfx942;gfx950"' in DOCKERFILE.read_text()
    assert images.arch_from_labels(ci) == ("gfx942;gfx950", f"label {label.VLLM_DEEPEP_ARCH}{DECLARED}")
    overridden = bake_labels(tmp_path, DEEPEP_ROCM_ARCH="gfx90a")  # the script's own env override
    assert images.arch_from_labels(overridden) == ("gfx90a", f"label {label.VLLM_DEEPEP_ARCH}{DECLARED}")
    facts = images.ImageFacts(*images.arch_from_labels(ci), "7.0", "label")
    assert facts.note("rocm/vllm-ci:build-7") == (
        "image rocm/vllm-ci:build-7: DeepEP built for gfx942;gfx950 (label vllm.rocm.deepep_rocm_arch, declared: "
        "no rocmci.evidence.deepep-arch (code objects not verified)); ROCm 7.0 (label)"
    )


def test_rocmcis_own_arch_label_comes_first_and_a_blank_one_says_nothing():
    both = {label.ARCH: "gfx942", label.VLLM_DEEPEP_ARCH: "gfx942;gfx950"}
    assert images.arch_from_labels(both) == ("gfx942", f"label {label.ARCH}{DECLARED}")
    blank = {label.ARCH: "  ", label.VLLM_DEEPEP_ARCH: " gfx950 "}
    assert images.arch_from_labels(blank) == ("gfx950", f"label {label.VLLM_DEEPEP_ARCH}{DECLARED}")
    assert images.arch_from_labels({label.VLLM_DEEPEP_ARCH: ""}) == (
        None,
        f"no {label.EVIDENCE_ARCH} or {label.ARCH} or {label.VLLM_DEEPEP_ARCH} label",
    )
    # Evidence over declarations: the label written from the image's verified code objects wins.
    verified = {**both, label.EVIDENCE_ARCH: "gfx950"}
    assert images.arch_from_labels(verified) == (
        "gfx950", f"label {label.EVIDENCE_ARCH}: DeepEP's code objects, read after the build"
    )


# --- --dry-run pulls nothing -----------------------------------------------------------------------------------


class _Api(http.server.BaseHTTPRequestHandler):
    """The two Docker Engine API calls `ensure` makes: the version, and an image's inspect (404 when missing)."""

    images: dict[str, dict[str, str]] = {}

    def do_GET(self):  # noqa: N802 - http.server's name
        path = re.sub(r"^/v[0-9.]+", "", self.path.split("?")[0])
        if path == "/version":
            self._json(200, {"ApiVersion": "1.43", "Version": "24.0.0", "MinAPIVersion": "1.12"})
        elif m := re.fullmatch(r"/images/(.+)/json", path):
            ref = __import__("urllib.parse").parse.unquote(m.group(1))
            if ref in self.images:
                self._json(200, {"Id": "sha256:" + "1" * 64, "RepoTags": [ref], "Config": {"Labels": self.images[ref]}})
            else:
                self._json(404, {"message": f"No such image: {ref}"})
        else:
            self._json(404, {"message": "page not found"})

    def _json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _ = super().get_request()
        return request, ("local", 0)  # http.server wants a (host, port) client address


@pytest.fixture
def engine(tmp_path, monkeypatch):
    """(an Engine whose SDK reaches the API stand-in and whose client is a recording docker, the client's log)."""
    sock = tmp_path / "docker.sock"
    server = _UnixServer(str(sock), _Api)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    log = tmp_path / "docker-calls"
    client = tmp_path / "docker"
    client.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\necho "pulled $2"\nexit 0\n')
    client.chmod(0o755)
    _Api.images = {"rocm/vllm-ci:build-7": {label.VLLM_DEEPEP_ARCH: "gfx942;gfx950"}}
    yield Engine(str(client)), log
    server.shutdown()
    server.server_close()


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize("pull", [True, False])
@pytest.mark.parametrize("ref", ["rocm/vllm-ci:build-7", "rocm/vllm-ci:build-8"], ids=["present", "missing"])
def test_a_dry_run_pulls_nothing_and_says_what_it_would_pull(engine, pull, ref):
    eng, log = engine
    said: list[str] = []
    got = images.ensure(eng, ref, pull=pull, dry_run=True, out=said.append)
    assert _calls(log) == []  # the docker client was never run
    present = ref in _Api.images
    assert got == (_Api.images[ref] if present else None)
    if pull or not present:
        assert said == [f"rocmci: dry run: would pull {ref}" + (" (present, --pull given)" if present else "")]
    else:
        assert said == []


def test_a_real_run_pulls_when_asked_and_when_missing_not_otherwise(engine):
    eng, log = engine
    said: list[str] = []
    assert images.ensure(eng, "rocm/vllm-ci:build-7", pull=False, dry_run=False, out=said.append) == {
        label.VLLM_DEEPEP_ARCH: "gfx942;gfx950"
    }
    assert _calls(log) == [] and said == []
    images.ensure(eng, "rocm/vllm-ci:build-7", pull=True, dry_run=False, out=said.append)
    assert _calls(log) == ["pull rocm/vllm-ci:build-7"]
    assert said[0] == "rocmci: pulling rocm/vllm-ci:build-7"


# --- an image's files copied below the scratch folder only ----------------------------------------------------


def _tar(members: list[tuple[str, str, bytes | str]]) -> bytes:
    """A tar stream as `docker cp CONTAINER:/path -` writes it: (kind, name, content or link target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                payload = data if isinstance(data, bytes) else data.encode()
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE}[kind]  # fmt: skip
            info.linkname = data if isinstance(data, str) else ""
            tar.addfile(info)
    return buf.getvalue()


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_an_images_tests_are_written_below_the_scratch_folder_only(tmp_path):
    scratch = tmp_path / "scratch" / "w"
    scratch.mkdir(parents=True)
    outside = tmp_path / "outside"
    data = _tar([
        ("dir", "tests", b""),
        ("file", "tests/test_a.py", "def test_a(): pass\n"),
        ("file", "tests/kernels/moe/test_b.py", "def test_b(): pass\n"),
        ("file", "tests/notes.txt", "not python\n"),
        ("file", "../evil_up.py", "escaped\n"),
        ("file", "tests/../../evil_deep.py", "escaped\n"),
        ("file", f"{outside}/evil_abs.py", "escaped\n"),
        ("symlink", "tests/link.py", "/etc/passwd"),
        ("symlink", "tests/up", "../../outside"),
        ("file", "tests/up/evil_through_link.py", "escaped\n"),
        ("hardlink", "tests/hard.py", "tests/test_a.py"),
        ("fifo", "tests/fifo.py", b""),
    ])  # fmt: skip
    assert images._python_files(data, scratch) == 3
    assert _tree(tmp_path) == [
        "scratch",
        "scratch/w",
        "scratch/w/tests",
        "scratch/w/tests/kernels",
        "scratch/w/tests/kernels/moe",
        "scratch/w/tests/kernels/moe/test_b.py",
        "scratch/w/tests/test_a.py",
        "scratch/w/tests/up",
        "scratch/w/tests/up/evil_through_link.py",
    ]
    assert not any(p.is_symlink() for p in tmp_path.rglob("*"))
    assert (scratch / "tests/test_a.py").read_text() == "def test_a(): pass\n"
    assert not outside.exists() and not (tmp_path / "evil_up.py").exists()
    assert os.listdir(tmp_path / "scratch") == ["w"]
