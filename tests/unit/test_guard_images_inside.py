"""What a run learns from inside an image, and what it says when an image is not there
(src/rocmci/runs/images.py): the code-object probe, the ROCm version, the image's facts, the export of its
tests, the `--build-id` refusal and the pull / local-only paths of `ensure`.

Real components: rocmci's Engine and the Docker SDK talk HTTP to a Docker-API stand-in on a unix socket; the
docker client is a stand-in that records each command and does what docker does for `run`, `create` and `cp`
against an "image" that is a folder of this host: its commands run with the folder's bin/ first on PATH, so
the probe runs rocmci's real verifier script (the exact argv rocmci builds) with this host's python3 against
a stand-in deep_ep package and a stand-in roc-obj-ls; `docker cp` writes real tar streams.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
import tarfile
from pathlib import Path

import pytest

from rocmci import labels as label
from rocmci.engine import Engine
from rocmci.errors import EngineError, PreflightError, UsageError
from rocmci.runs import images
from tests.unit import test_guard_images as guard

# The stand-in docker client. Its state (which images exist, what they hold, which containers were created)
# is a JSON file beside it; every call is logged as one JSON line.
CLIENT = r'''#!{python}
import json, os, shutil, subprocess, sys
STATE = {state!r}
LOG = {log!r}
argv = sys.argv[1:]
with open(LOG, "a") as f:
    f.write(json.dumps(argv) + "\n")
with open(STATE) as f:
    state = json.load(f)

def options(args, valued):
    """docker's own parse: options (some with a value) up to the image, then the command."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in valued else 1
    return args[i:]

if argv[0] == "pull":
    print("pulled " + argv[1])
    sys.exit(state.get("pull_rc", 0))
if argv[0] in ("run", "create"):
    rest = options(argv[1:], ("--name", "--label", "--network"))
    image, command = rest[0], rest[1:]
    if image not in state["images"]:
        print("Unable to find image '%s' locally" % image, file=sys.stderr)
        sys.exit(125)
    if argv[0] == "create":
        state["containers"][argv[argv.index("--name") + 1]] = image
        with open(STATE, "w") as f:
            json.dump(state, f)
        print("0123456789ab")
        sys.exit(0)
    root = state["images"][image]["root"]
    if command[0] == "cat":  # a file of the image, by its path inside it
        path = os.path.join(root, command[1].lstrip("/"))
        if not os.path.isfile(path):
            print("cat: %s: No such file or directory" % command[1], file=sys.stderr)
            sys.exit(1)
        sys.stdout.write(open(path).read())
        sys.exit(0)
    exe = shutil.which(command[0], path=os.path.join(root, "bin"))
    if exe is None:
        print("exec: %r: executable file not found in $PATH" % command[0], file=sys.stderr)
        sys.exit(127)
    env = {{"PATH": os.path.join(root, "bin"), "PYTHONPATH": os.path.join(root, "site"),
           "ROCSHMEM_DIR": os.path.join(root, "opt/rocshmem")}}
    sys.exit(subprocess.run([exe, *command[1:]], env=env).returncode)
if argv[0] == "cp":
    source, dest = argv[1], argv[2]
    name, _, path = source.partition(":")
    if dest != "-" or name not in state["containers"]:
        print("Error: No such container:path: " + source, file=sys.stderr)
        sys.exit(1)
    tree = state["images"][state["containers"][name]].get("trees", {{}}).get(path)
    if tree is None:
        print("Error: Could not find the file %s in container %s" % (path, name), file=sys.stderr)
        sys.exit(1)
    sys.stdout.buffer.write(open(tree["stream"], "rb").read())
    sys.exit(tree.get("rc", 0))
print("unknown command " + argv[0], file=sys.stderr)
sys.exit(2)
'''

# roc-obj-ls, as ROCm's prints the offload bundles of a library; the stand-in library lists its bundle IDs.
ROC_OBJ_LS = r"""#!{python}
import sys
for n, bundle in enumerate(open(sys.argv[1]).read().split(), 1):
    print("%d       %s        file://%s#offset=%d&size=100" % (n, bundle, sys.argv[1], n * 4096))
"""


class _Api(guard._Api):
    """The image inspects of test_guard_images' stand-in, plus the container removal rocmci asks for."""

    removed: list[str] = []

    def do_DELETE(self):  # noqa: N802 - http.server's name
        path = re.sub(r"^/v[0-9.]+", "", self.path.split("?")[0])
        if m := re.fullmatch(r"/containers/([^/]+)", path):
            self.removed.append(m.group(1))
            self.send_response(204)
            self.end_headers()
        else:
            self._json(404, {"message": "page not found"})


class Docker:
    """The stand-ins' state: images (folders of this host) and what the client was asked."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        self.state_file = tmp_path / "state.json"
        self.log = tmp_path / "docker-calls"
        self.state: dict = {"images": {}, "containers": {}}
        self.save()
        client = tmp_path / "docker"
        client.write_text(CLIENT.format(python=sys.executable, state=str(self.state_file), log=str(self.log)))
        client.chmod(0o755)
        self.engine = Engine(str(client))

    def save(self) -> None:
        self.state_file.write_text(json.dumps(self.state))

    def image(self, ref: str, *, python: bool = True, files: dict[str, str] | None = None) -> Path:
        root = self.dir / "images" / re.sub(r"[^A-Za-z0-9]", "_", ref)
        (root / "bin").mkdir(parents=True)
        (root / "site").mkdir()
        if python:
            (root / "bin" / "python3").symlink_to(sys.executable)
        for path, text in (files or {}).items():
            (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / path.lstrip("/")).write_text(text)
        self.state["images"][ref] = {"root": str(root), "trees": {}}
        self.save()
        return root

    def deep_ep(self, root: Path, bundles: list[str] | None) -> None:
        """A deep_ep package whose extension library carries these offload bundles (None: no roc-obj-ls)."""
        (root / "site" / "deep_ep").mkdir()
        (root / "site" / "deep_ep" / "__init__.py").write_text("")
        (root / "site" / "deep_ep_cpp.cpython-312-x86_64-linux-gnu.so").write_text("\n".join(bundles or []))
        if bundles is not None:
            tool = root / "bin" / "roc-obj-ls"
            tool.write_text(ROC_OBJ_LS.format(python=sys.executable))
            tool.chmod(0o755)

    def tree(self, ref: str, path: str, stream: bytes, rc: int = 0) -> None:
        """What `docker cp CONTAINER:path -` of this image writes to its standard output."""
        name = self.dir / f"stream-{len(list(self.dir.glob('stream-*')))}"
        name.write_bytes(stream)
        self.state["images"][ref]["trees"][path] = {"stream": str(name), "rc": rc}
        self.save()

    def calls(self) -> list[list[str]]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def created(self) -> list[str]:
        return list(json.loads(self.state_file.read_text())["containers"])


@pytest.fixture
def docker(tmp_path, monkeypatch):
    sock = tmp_path / "docker.sock"
    server = guard._UnixServer(str(sock), _Api)
    import threading

    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
    _Api.images = {}
    _Api.removed = []
    yield Docker(tmp_path)
    server.shutdown()
    server.server_close()


PROBE_NAME = re.compile(r"rocmci-probe-[0-9a-f]{10}")


def _probe_calls(docker: Docker, image: str, command: list[str]) -> None:
    """Each probe is `docker run` (no --rm) without network, labelled as rocmci's, and removed by name afterwards."""
    runs = [c for c in docker.calls() if c[0] == "run"]
    assert runs, docker.calls()
    for call in runs:
        name = call[2]
        assert call[:2] == ["run", "--name"] and PROBE_NAME.fullmatch(name)
        assert call[3:] == ["--label", f"{label.MANAGED}=1", "--network", "none", image, *command]
    assert _Api.removed == [c[2] for c in runs]


# --- the code-object probe: rocmci's verifier run inside an image that has no arch label ------------------------


def test_the_probe_reads_deepeps_code_objects_with_the_real_verifier(docker):
    root = docker.image("rocm/vllm-ci:build-9")
    docker.deep_ep(root, ["host-x86_64-unknown-linux-gnu--", "hipv4-amdgcn-amd-amdhsa--gfx950",
                          "hipv4-amdgcn-amd-amdhsa--gfx942"])  # fmt: skip
    assert images.probe_code_objects(docker.engine, "rocm/vllm-ci:build-9") == (
        "gfx942;gfx950",
        "code objects of 1 DeepEP libraries",
    )
    script = images.VERIFY_SCRIPT.read_text(encoding="utf-8")
    [run] = [c for c in docker.calls() if c[0] == "run"]
    assert run[8:] == ["python3", "-c", script, "--expect", ""]
    _probe_calls(docker, "rocm/vllm-ci:build-9", ["python3", "-c", script, "--expect", ""])


def test_a_deepep_without_device_code_says_none_listed(docker):
    # Nothing expected (--expect ""), nothing found: the verifier's answer has no error to show.
    docker.deep_ep(docker.image("img:nocode"), ["host-x86_64-unknown-linux-gnu--"])
    assert images.probe_code_objects(docker.engine, "img:nocode") == (None, "no DeepEP code objects found: none listed")


def test_an_image_without_deepep_says_why_the_probe_found_nothing(docker):
    docker.image("img:plain")
    archs, why = images.probe_code_objects(docker.engine, "img:plain")
    assert archs is None
    assert why == "no DeepEP code objects found: import deep_ep failed: ModuleNotFoundError: No module named 'deep_ep'"


def test_an_image_without_python3_gives_no_answer(docker):
    docker.deep_ep(docker.image("img:nopython", python=False), ["hipv4-amdgcn-amd-amdhsa--gfx942"])
    assert images.probe_code_objects(docker.engine, "img:nopython") == (None, "the code-object probe gave no answer")


def test_a_missing_verifier_or_client_is_one_line_not_a_crash(docker, monkeypatch, tmp_path):
    missing = Engine(str(tmp_path / "no-docker"))
    archs, why = images.probe_code_objects(missing, "img:any")
    assert (archs, why) == (
        None,
        f"no label, and the code-object probe failed: docker client {str(tmp_path / 'no-docker')!r} not found",
    )
    monkeypatch.setattr(images, "VERIFY_SCRIPT", tmp_path / "gone" / "verify_deepep.py")
    assert images.probe_code_objects(docker.engine, "img:any") == (
        None,
        "no label, and the code-object probe verify_deepep.py is not installed",
    )
    assert docker.calls() == []


# --- the ROCm version: vLLM's label, else the image's /opt/rocm/.info/version --------------------------------


def test_the_rocm_label_comes_first_and_nothing_is_run_for_it(docker):
    docker.image("img:v", files={images.ROCM_VERSION_FILE: "6.3.1-48\n"})
    assert images.rocm_version(docker.engine, "img:v", {label.VLLM_ROCM_VERSION: " 7.0.2 "}) == (
        "7.0.2",
        f"label {label.VLLM_ROCM_VERSION}",
    )
    assert docker.calls() == []
    assert images.rocm_version(None, "img:v", {label.VLLM_ROCM_VERSION: "7.0"}) == (
        "7.0",
        f"label {label.VLLM_ROCM_VERSION}",
    )
    assert images.rocm_version(None, "img:v", {}) == (None, "")  # no engine (a dry run without one): unknown


@pytest.mark.parametrize("version", ["6.3.1-48", "7.0.0-rc1", "6.4.0-RC2", "7.1"])
def test_without_a_label_the_version_file_of_the_image_is_read(docker, version):
    docker.image("img:v", files={images.ROCM_VERSION_FILE: f"{version}\n"})
    assert images.rocm_version(docker.engine, "img:v", {label.VLLM_ROCM_VERSION: "  "}) == (
        version,
        images.ROCM_VERSION_FILE,
    )
    _probe_calls(docker, "img:v", ["cat", images.ROCM_VERSION_FILE])


@pytest.mark.parametrize("content", [None, "not a version\n", "v6.3\n", "6.3 and more\n"])
def test_a_missing_or_odd_version_file_is_unknown(docker, content):
    docker.image("img:v", files={} if content is None else {images.ROCM_VERSION_FILE: content})
    assert images.rocm_version(docker.engine, "img:v", {}) == (None, "")


# --- an image's facts, and the line that says them ------------------------------------------------------------


def test_the_facts_of_a_labelled_image_are_read_from_its_labels_alone(docker):
    docker.image("img:l")
    labels = {label.VLLM_DEEPEP_ARCH: "gfx942;gfx950", label.VLLM_ROCM_VERSION: "7.0"}
    got = images.facts(docker.engine, "img:l", labels)
    assert got == images.ImageFacts(*images.arch_from_labels(labels), "7.0", f"label {label.VLLM_ROCM_VERSION}")
    assert docker.calls() == []


def test_the_facts_of_an_unlabelled_image_come_from_inside_it(docker):
    root = docker.image("img:u", files={images.ROCM_VERSION_FILE: "6.3.1-48\n"})
    docker.deep_ep(root, ["hipv4-amdgcn-amd-amdhsa--gfx942"])
    got = images.facts(docker.engine, "img:u", {})
    assert got == images.ImageFacts(
        "gfx942", "code objects of 1 DeepEP libraries", "6.3.1-48", images.ROCM_VERSION_FILE
    )
    assert got.note("img:u") == (
        "image img:u: DeepEP built for gfx942 (code objects of 1 DeepEP libraries); "
        "ROCm 6.3.1-48 (/opt/rocm/.info/version)"
    )


def test_the_note_of_an_image_nothing_is_known_of():
    facts = images.ImageFacts(None, "no rocmci.evidence.deepep-arch or rocmci.deepep-arch label")
    assert facts.note("img:x") == (
        "image img:x: no rocmci.evidence.deepep-arch or rocmci.deepep-arch label; ROCm version unknown"
    )


# --- the verifier's answer ------------------------------------------------------------------------------------


def test_only_gfx_targets_of_the_answer_count_and_its_error_is_shown():
    answer = json.dumps({"found": ["gfx942", "sm_90", "gfx90a"], "libraries": ["a.so", "b.so"]})
    assert images.parse_probe(answer) == ("gfx90a;gfx942", "code objects of 2 DeepEP libraries")
    failed = json.dumps({"found": [], "error": "roc-obj-ls not found (ROCm's /opt/rocm/bin)"})
    assert images.parse_probe(failed) == (
        None,
        "no DeepEP code objects found: roc-obj-ls not found (ROCm's /opt/rocm/bin)",
    )
    assert images.parse_probe(json.dumps({"found": ["sm_90"]})) == (None, "no DeepEP code objects found: none listed")


# --- --build-id ---------------------------------------------------------------------------------------------


def test_a_bad_build_id_is_one_line_with_its_first_40_characters_and_a_hint():
    raw = "x" * 39 + "/" + "y" * 20
    with pytest.raises(UsageError) as err:
        images.build_id("--build-id", raw)
    assert err.value.message == f"--build-id {raw[:40]!r} is not a build id"
    assert err.value.hint == "give BUILDKITE_BUILD_ID, e.g. --build-id 4711"


# --- ensure: the tag image.build gives, and pulls ------------------------------------------------------------


def test_a_missing_local_only_tag_is_never_pulled(docker):
    said: list[str] = []
    assert (
        images.ensure(docker.engine, "rocmci/w:t", pull=False, dry_run=True, out=said.append, local_only=True) is None
    )
    assert said == ["rocmci: dry run: rocmci/w:t is not here; it is the tag `rocmci image.build` gives (not pulled)"]
    with pytest.raises(PreflightError) as err:
        images.ensure(docker.engine, "rocmci/w:t", pull=False, dry_run=False, out=said.append, local_only=True)
    assert err.value.message == (
        "image rocmci/w:t is not here: it is the tag `rocmci image.build` gives, which no registry holds"
    )
    assert err.value.hint == (
        "build it with `rocmci image.build`, or run the CI image of a build with --build-id N (or --image)"
    )
    assert docker.calls() == []


def test_a_present_local_only_tag_is_used_and_pull_still_pulls_it(docker):
    _Api.images = {"rocmci/w:t": {label.ARCH: "gfx942"}}
    said: list[str] = []
    got = images.ensure(docker.engine, "rocmci/w:t", pull=False, dry_run=False, out=said.append, local_only=True)
    assert got == {label.ARCH: "gfx942"} and said == [] and docker.calls() == []
    _Api.images = {}  # --pull of the missing tag asks the registry all the same (what the user asked for)
    docker.state["pull_rc"] = 1
    docker.save()
    with pytest.raises(EngineError):
        images.ensure(docker.engine, "rocmci/w:t", pull=True, dry_run=False, out=said.append, local_only=True)
    assert docker.calls() == [["pull", "rocmci/w:t"]]


def test_a_pull_shows_the_clients_lines_and_returns_the_labels_after_it(docker):
    _Api.images = {"img:p": {label.VLLM_DEEPEP_ARCH: "gfx950"}}
    said: list[str] = []
    assert images.ensure(docker.engine, "img:p", pull=True, dry_run=False, out=said.append) == {
        label.VLLM_DEEPEP_ARCH: "gfx950"
    }
    assert said == ["rocmci: pulling img:p", "pulled img:p"]


def test_a_failed_pull_of_a_missing_image_is_an_error_of_a_present_one_a_note(docker):
    docker.state["pull_rc"] = 1
    docker.save()
    said: list[str] = []
    with pytest.raises(EngineError) as err:
        images.ensure(docker.engine, "img:gone", pull=False, dry_run=False, out=said.append)
    assert err.value.message == "could not pull img:gone (docker pull exited 1)"
    assert err.value.hint == "check the name and that you are logged in to its registry"
    _Api.images = {"img:here": {label.ARCH: "gfx90a"}}
    said.clear()
    assert images.ensure(docker.engine, "img:here", pull=True, dry_run=False, out=said.append) == {label.ARCH: "gfx90a"}
    assert said == ["rocmci: pulling img:here", "pulled img:here",
                    "rocmci: docker pull img:here exited 1; using the local copy"]  # fmt: skip


# --- export_tests: the image's tests/ tree, through a throw-away container ----------------------------------


TESTS_NAME = re.compile(r"rocmci-tests-[0-9a-f]{10}")
PYTEST_FILES = [("dir", "tests", b""), ("file", "tests/test_a.py", "def test_a(): pass\n"),
                ("file", "tests/test_b.py", "def test_b(): pass\n")]  # fmt: skip


def _export_calls(docker: Docker, image: str, paths: list[str]) -> None:
    """The exact commands the engine got: a created (never started) container without network, labelled as
    rocmci's so a leftover is found, a `docker cp ... -` to standard output per tree asked, and its removal."""
    [name] = docker.created()
    assert TESTS_NAME.fullmatch(name)
    assert docker.calls() == [
        ["create", "--name", name, "--label", f"{label.MANAGED}=1", "--network", "none", image, "true"],
        *(["cp", f"{name}:{p}", "-"] for p in paths),
    ]
    assert _Api.removed == [name]


@pytest.mark.parametrize("found", [0, 1])
def test_the_first_tests_tree_an_image_holds_is_exported(docker, tmp_path, found):
    docker.image("img:t")
    docker.tree("img:t", images.TEST_TREES[found], guard._tar(PYTEST_FILES))
    dest = tmp_path / "dest"
    assert images.export_tests(docker.engine, "img:t", dest) == (dest, images.TEST_TREES[found].rsplit("/", 1)[0])
    assert guard._tree(dest) == ["tests", "tests/test_a.py", "tests/test_b.py"]
    _export_calls(docker, "img:t", list(images.TEST_TREES[: found + 1]))


def test_an_image_without_tests_or_without_the_image_gives_none(docker, tmp_path):
    docker.image("img:empty")
    assert images.export_tests(docker.engine, "img:empty", tmp_path / "d") is None
    _export_calls(docker, "img:empty", list(images.TEST_TREES))
    _Api.removed.clear()
    docker.log.unlink()
    # An image that is not there: the create fails and nothing more is asked of the engine.
    assert images.export_tests(docker.engine, "img:nothere", tmp_path / "d") is None
    assert [c[0] for c in docker.calls()] == ["create"] and _Api.removed == []
    assert images.export_tests(Engine(str(tmp_path / "no-docker")), "img:empty", tmp_path / "d") is None


@pytest.mark.parametrize(
    "stream",
    [b"x", b"not a tar stream" * 64, gzip.compress(guard._tar(PYTEST_FILES))],
    ids=["one-byte", "garbage", "compressed"],  # docker cp writes plain tar; a gzip one would pass the size bound
)
def test_a_broken_stream_stops_the_export(docker, tmp_path, stream):
    docker.image("img:b")
    docker.tree("img:b", images.TEST_TREES[0], stream)
    docker.tree("img:b", images.TEST_TREES[1], guard._tar(PYTEST_FILES))
    assert images.export_tests(docker.engine, "img:b", tmp_path / "d") is None
    _export_calls(docker, "img:b", [images.TEST_TREES[0]])


def test_an_empty_or_failed_copy_goes_on_to_the_next_tree(docker, tmp_path):
    docker.image("img:e")
    docker.tree("img:e", images.TEST_TREES[0], b"")  # exit 0, nothing written
    docker.tree("img:e", images.TEST_TREES[1], guard._tar(PYTEST_FILES))
    assert images.export_tests(docker.engine, "img:e", tmp_path / "d") == (tmp_path / "d", "/opt/vllm-ci/workspace")
    docker.image("img:f")
    docker.tree("img:f", images.TEST_TREES[0], guard._tar(PYTEST_FILES), rc=1)  # a copy that failed half-way
    docker.tree("img:f", images.TEST_TREES[1], guard._tar(PYTEST_FILES[:2]))
    assert images.export_tests(docker.engine, "img:f", tmp_path / "f") == (tmp_path / "f", "/opt/vllm-ci/workspace")
    assert guard._tree(tmp_path / "f") == ["tests", "tests/test_a.py"]


def test_a_stream_over_the_bound_is_not_read(docker, tmp_path, monkeypatch):
    stream = guard._tar(PYTEST_FILES)
    docker.image("img:big")
    docker.tree("img:big", images.TEST_TREES[0], stream)
    monkeypatch.setattr(images, "MAX_TESTS_BYTES", len(stream))  # exactly at the bound: read
    assert images.export_tests(docker.engine, "img:big", tmp_path / "a") == (tmp_path / "a", "/vllm-workspace")
    monkeypatch.setattr(images, "MAX_TESTS_BYTES", len(stream) - 1)
    assert images.export_tests(docker.engine, "img:big", tmp_path / "b") is None
    assert not (tmp_path / "b").exists()


def test_every_python_file_of_a_folder_is_written(tmp_path):
    data = guard._tar([*PYTEST_FILES, ("file", "tests/sub/c.py", "c\n"), ("file", "tests/sub/d.py", "d\n")])
    assert images._python_files(data, tmp_path) == 4
    assert guard._tree(tmp_path) == ["tests", "tests/sub", "tests/sub/c.py", "tests/sub/d.py", "tests/test_a.py",
                                     "tests/test_b.py"]  # fmt: skip
    with pytest.raises(tarfile.TarError):
        images._python_files(gzip.compress(data), tmp_path / "z")
