#!/usr/bin/env bash
# Generate the AMD pipeline for this build, validate it (generate refuses to write an invalid one),
# and hand it to `buildkite-agent pipeline upload`. Without the agent binary it is a dry run that
# prints what would be uploaded.
set -euo pipefail
cd "$(dirname "$0")/.."

args=()
if [ "${BUILDKITE_SOURCE:-}" = "schedule" ]; then
  args+=(--nightly)
elif [ "${BUILDKITE_PULL_REQUEST:-false}" != "false" ] && [ -n "${BUILDKITE_PULL_REQUEST_BASE_BRANCH:-}" ]; then
  args+=(--diff-base "origin/${BUILDKITE_PULL_REQUEST_BASE_BRANCH}")
else
  args+=(--run-all)
fi

out=$(mktemp --suffix=.yaml)
trap 'rm -f "$out"' EXIT
invoke pipeline.generate "${args[@]}" --out "$out"

if command -v buildkite-agent >/dev/null 2>&1; then
  buildkite-agent pipeline upload "$out"
else
  echo "dry run: buildkite-agent not found; this pipeline would be uploaded:" >&2
  cat "$out"
fi
