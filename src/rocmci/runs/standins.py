"""The programs rocmci puts first on the PATH of vLLM's runner: `docker`, `buildkite-agent` and, in a
dry run or on a stand-in host, the host tools. Each records how it was called (NUL-separated words, a
record starting with RECORD), so what the runner did is read from what it ran, never from its text.

In a dry run (ROCMCI_MODE=trace) nothing reaches an engine: `docker run` records the command it would
start and returns. In a run, `docker run` starts that same command: the runner's words plus rocmci's
label, container-id file and results mount (runs/jobs.py lists them with their reasons).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

RECORD = "\x1e"
_RECORDS = 'rec() { { printf "\\036\\0"; printf "%s\\0" "$@"; } >> "${ROCMCI_TRACE:-/dev/null}"; }\n'

DOCKER = (
    "#!/bin/bash\n"
    "# rocmci's docker on the runner's PATH (rocmci/runs/standins.py).\n" + _RECORDS + 'rec call docker "$@"\n'
    'if [[ "$1" == run ]]; then\n'
    "  shift\n"
    "  args=() prev=''\n"
    '  for word in "$@"; do\n'
    "    # A stand-in host (--host-root): the runner's own /dev paths are that host's.\n"
    '    if [[ "$prev" == --device && -n "${ROCMCI_HOST_ROOT:-}" && "$word" == /dev/* && "$word" != *:* ]]; then\n'
    '      word="${ROCMCI_HOST_ROOT}${word}:${word}"\n'
    "    fi\n"
    '    args+=("$word"); prev="$word"\n'
    "  done\n"
    "  given=()\n"
    "  # --env NAME=VALUE given to rocmci: by name, the value stays in this environment.\n"
    '  for name in ${ROCMCI_PASS_ENV:-}; do given+=(--env "$name"); done\n'
    '  set -- "${ROCMCI_DOCKER:-docker}" run --cidfile "$ROCMCI_CIDFILE" --label rocmci.managed=1 \\\n'
    '    --label "rocmci.job=$ROCMCI_JOB" --volume "$ROCMCI_RESULTS:/rocmci-results" "${given[@]}" "${args[@]}"\n'
    '  rec exec "$@"\n'
    '  [[ "${ROCMCI_MODE:-}" == trace ]] && exit "${ROCMCI_TRACE_EXIT:-0}"\n'
    '  exec "$@"\n'
    "fi\n"
    'if [[ "${ROCMCI_MODE:-}" == trace ]]; then\n'
    '  case "$1" in\n'
    "    container|inspect) exit 1 ;;  # no container of that name exists\n"
    "    --version) echo 'Docker version 0.0.0-rocmci-dry-run, build none'; exit 0 ;;\n"
    "    *) exit 0 ;;\n"
    "  esac\n"
    "fi\n"
    'if [[ "$1" == pull ]]; then\n'
    '  echo "rocmci: not pulled by the runner: ${*: -1} (rocmci pulled it before the job when asked or missing)"\n'
    "  exit 0\n"
    "fi\n"
    'exec "${ROCMCI_DOCKER:-docker}" "$@"\n'
)

# Keeps what the job hands to Buildkite in the results folder (ROCMCI_AGENT_DIR).
BUILDKITE_AGENT = (
    "#!/bin/bash\n"
    "# rocmci's buildkite-agent for one job (rocmci/runs/standins.py).\n" + _RECORDS + 'rec call buildkite-agent "$@"\n'
    'dir="${ROCMCI_AGENT_DIR:-/tmp/rocmci-agent}"\n'
    'case "$1 ${2:-}" in\n'
    '  "artifact upload")\n'
    '    mkdir -p "$dir/artifacts" && shopt -s globstar nullglob\n'
    "    # shellcheck disable=SC2206  # the pattern is a glob, as the agent reads it\n"
    "    files=($3)\n"
    '    for f in "${files[@]}"; do cp --parents -r -- "$f" "$dir/artifacts/" || exit 1; done\n'
    "    exit 0 ;;\n"
    '  "artifact download") echo "rocmci: no Buildkite artifacts outside Buildkite: $3" >&2; exit 1 ;;\n'
    '  "meta-data set") mkdir -p "$dir/meta-data" && printf "%s" "${4-$(cat)}" \\\n'
    '    > "$dir/meta-data/${3//\\//_}"; exit ;;\n'
    '  "meta-data get") cat -- "$dir/meta-data/${3//\\//_}" 2>/dev/null ;;\n'
    '  "meta-data exists") [[ -f "$dir/meta-data/${3//\\//_}" ]] ;;\n'
    "  annotate*)\n"
    '    mkdir -p "$dir" && body="${2:-}" && [[ -z "$body" || "$body" == --* ]] && body=$(cat)\n'
    '    printf "%s\\n" "$body" >> "$dir/annotations.md"; exit 0 ;;\n'
    "  *) exit 0 ;;\n"
    "esac\n"
)

# Only in a dry run or on a stand-in host: the host's ROCm tools and its render group.
QUIET = "#!/bin/bash\n" + _RECORDS + 'rec call "${0##*/}" "$@"\nexit 0\n'
# A dry run reaches no network: the runner's failure diagnostics probe Hugging Face and GitHub with curl.
OFFLINE = "#!/bin/bash\n" + _RECORDS + 'rec call "${0##*/}" "$@"\nexit 7\n'
GETENT = (
    "#!/bin/bash\n" + _RECORDS + 'rec call getent "$@"\n'
    'if [[ "$1 $2" == "group render" && -n "${ROCMCI_RENDER_GID:-}" ]]; then\n'
    '  echo "render:x:${ROCMCI_RENDER_GID}:"; exit 0\n'
    "fi\n"
    'exec /usr/bin/getent "$@"\n'
)
# A dry run records the runner's time bound and runs what it bounds (the docker stand-in) at once.
TIMEOUT = (
    "#!/bin/bash\n" + _RECORDS + 'rec call timeout "$@"\nwhile [[ "$1" == -* ]]; do shift; done\nshift\nexec "$@"\n'
)


@dataclass(frozen=True)
class Call:
    kind: str  # "call": what the runner ran; "exec": what rocmci's docker starts for a `docker run`
    argv: tuple[str, ...]


def write(folder: Path, *, host_tools: bool) -> Path:
    """The stand-ins' folder (to put first on PATH); host_tools: rocminfo, rocm-smi, getent, timeout too."""
    folder.mkdir(parents=True, exist_ok=True)
    programs = {"docker": DOCKER, "buildkite-agent": BUILDKITE_AGENT}
    if host_tools:
        programs.update({"rocminfo": QUIET, "rocm-smi": QUIET, "getent": GETENT, "timeout": TIMEOUT, "curl": OFFLINE})
    for name, text in programs.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        os.chmod(path, 0o755)
    return folder


def read(trace: Path) -> list[Call]:
    """The recorded calls, in order."""
    try:
        data = trace.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for record in data.split(RECORD + "\0")[1:]:
        words = record.split("\0")[:-1]
        if words:
            out.append(Call(words[0], tuple(words[1:])))
    return out
