"""image/features (issue 35): what a Dockerfile needs of its builder, the probe that asks the builder, and the
one-line refusal.

Each probe is a whole Dockerfile that the builder's parser must read exactly as it reads the file's own
instruction, and that then fails before any image exists: it starts `FROM scratch` (the one base that is no
registry image; the name is case-sensitive), repeats the file's flag word for word, and ends in a step that
cannot succeed (a missing file, an unreachable URL, a command on an empty image). Here their text is read
back by rocmci's own Dockerfile parser, which must find in each exactly the one feature it probes; what a real
builder answers to them is in docs/guards.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmci.checkout import parse
from rocmci.errors import PreflightError
from rocmci.image import features

DISPLAY = "docker/Dockerfile.rocm"
DOCKERFILE = """# syntax=docker/dockerfile:1.7
FROM --platform=linux/amd64 scratch AS a
ADD --checksum=sha256:abc https://example.invalid/y /z
COPY --link --chmod=755 a /b
RUN --mount=type=cache,target=/root/.cache --network=none pip install x
COPY --from=a --chown=1 /a /b
RUN <<EOF
echo hi
EOF
ADD --keep-git-dir=true https://example.invalid/x.git /src
HEALTHCHECK --interval=5s --timeout=3s --start-period=1s --retries=2 --start-interval=1s CMD true
"""
MISSING = "rocmci-probe-missing"


def _df(text: str = DOCKERFILE):
    return parse(text, path=Path("Dockerfile"), display=DISPLAY)


def _uses(text: str = DOCKERFILE) -> dict[str, features.Use]:
    return {u.feature: u for u in features.uses(_df(text))}


def test_each_feature_is_named_at_its_first_line_and_classic_flags_need_nothing():
    found = features.uses(_df())
    assert [(u.feature, u.line) for u in found] == [
        ("# syntax=docker/dockerfile:1.7", 1),
        ("ADD --checksum", 3),
        ("COPY --link", 4),
        ("COPY --chmod", 4),
        ("RUN --mount", 5),
        ("RUN --network", 5),
        ("heredocs", 7),
        ("ADD --keep-git-dir", 10),
        ("HEALTHCHECK --start-interval", 11),
    ]


def test_each_probe_is_the_files_own_flag_on_scratch_followed_by_a_step_that_fails():
    probes = {name: use.probe for name, use in _uses().items()}
    assert probes == {
        "# syntax=docker/dockerfile:1.7": None,  # a frontend fetched at build time: not probed
        "ADD --checksum": f"FROM scratch\nADD --checksum=sha256:{'0' * 64} {features._UNREACHABLE} /probe\n",
        "COPY --link": f"FROM scratch\nCOPY --link {MISSING} /probe\n",
        "COPY --chmod": f"FROM scratch\nCOPY --chmod=755 {MISSING} /probe\n",
        "RUN --mount": "FROM scratch\nRUN --mount=type=cache,target=/root/.cache true\n",
        "RUN --network": "FROM scratch\nRUN --network=none true\n",
        "heredocs": "FROM scratch\nRUN <<EOF\ntrue\nEOF\n",
        "ADD --keep-git-dir": f"FROM scratch\nADD --keep-git-dir=true {MISSING} /probe\n",
        "HEALTHCHECK --start-interval": (
            f"FROM scratch\nHEALTHCHECK --start-interval=1s CMD true\nCOPY {MISSING} /probe\n"
        ),
    }


def test_an_add_checksum_probe_holds_a_well_formed_sha256_and_a_url_that_fails_at_once():
    probe = _uses()["ADD --checksum"].probe
    digest = probe.split("--checksum=sha256:", 1)[1].split()[0]
    assert len(digest) == 64 and set(digest) == {"0"}  # BuildKit checks a digest's form when it parses
    assert features._UNREACHABLE.startswith("http://127.0.0.1:9/")  # the discard port: refused at once


@pytest.mark.parametrize("feature", sorted(f for f in _uses() if not f.startswith("#")))
def test_a_probe_read_back_uses_exactly_the_feature_it_probes(feature):
    probe = _uses()[feature].probe
    assert probe.splitlines()[0] == "FROM scratch"
    assert [u.feature for u in features.uses(_df(probe))] == [feature]


def test_a_probe_of_a_flag_on_another_instruction_still_fails_before_an_image_exists():
    assert (
        features._probe("ONBUILD", "future", "--future=1")
        == f"FROM scratch\nONBUILD --future=1\nCOPY {MISSING} /probe\n"
    )


def test_only_probes_the_builder_rejects_are_gaps_with_the_builders_words():
    found = features.uses(_df())
    asked = []

    def parses(probe: str) -> tuple[bool, str]:
        asked.append(probe)
        rejected = "--checksum" in probe or "<<EOF" in probe
        return (not rejected, "dockerfile parse error line 2: Unknown flag: checksum" if rejected else "accepted")

    gaps = features.missing(found, parses)
    assert asked == [u.probe for u in found if u.probe is not None]
    assert [(g.use.feature, g.why) for g in gaps] == [
        ("ADD --checksum", "dockerfile parse error line 2: Unknown flag: checksum"),
        ("heredocs", "dockerfile parse error line 2: Unknown flag: checksum"),
    ]


def _gap(feature: str, why: str = "dockerfile parse error line 2: Unknown flag: x") -> features.Gap:
    return features.Gap(_uses()[feature], why)


def test_a_gap_is_described_at_the_files_line_with_the_frontend_that_made_it_stable():
    df = _df()
    assert features.describe(df, _gap("ADD --checksum", "dockerfile parse error line 2: Unknown flag: checksum")) == (
        f"{DISPLAY}:3 uses ADD --checksum (Dockerfile frontend 1.6+); this builder rejects it "
        "(dockerfile parse error: Unknown flag: checksum)"
    )
    assert features.describe(df, _gap("COPY --chmod", "unknown instruction")) == (
        f"{DISPLAY}:4 uses COPY --chmod; this builder rejects it (unknown instruction)"
    )


def test_only_an_unprobed_syntax_line_is_a_note():
    assert features.notes(_df(), features.uses(_df())) == [
        f"{DISPLAY}:1 # syntax=docker/dockerfile:1.7: "
        "BuildKit pulls that frontend from its registry when the build starts"
    ]


def test_the_refusal_names_the_first_gap_counts_the_others_and_says_what_to_do():
    df = _df()
    one = features.refusal(df, [_gap("COPY --link")], "docker")
    assert isinstance(one, PreflightError)
    assert one.message == f"docker cannot build {DISPLAY}: {features.describe(df, _gap('COPY --link'))}"
    assert one.hint == features.WHAT_TO_DO
    two = features.refusal(df, [_gap("COPY --link"), _gap("RUN --mount")], "docker")
    assert two.message.endswith("(dockerfile parse error: Unknown flag: x) (and 1 more: RUN --mount)")
    three = features.refusal(df, [_gap("COPY --link"), _gap("RUN --mount"), _gap("heredocs")], "/opt/docker")
    assert three.message.startswith(f"/opt/docker cannot build {DISPLAY}: {DISPLAY}:4 uses COPY --link (")
    assert three.message.endswith(" (and 2 more: RUN --mount, heredocs)")
