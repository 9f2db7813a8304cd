#!/usr/bin/env bash
# CI entrypoint: generate the AMD pipeline as ci-infra's template would (bootstrap-amd.sh's decisions
# included), validate it, and hand it to `buildkite-agent pipeline upload`.
#
# --keep-going: one bad step never stops vLLM's CI. The pipeline is written even with errors; each
# step with an error waits behind a block step that names the finding, and all findings are posted
# as a Buildkite annotation. Without the agent binary this is a dry run that prints the pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."

args=(--keep-going)
if [ "${NIGHTLY:-0}" = "1" ] || [ "${BUILDKITE_SOURCE:-}" = "schedule" ]; then
  args+=(--nightly)
fi
if [ "${RUN_ALL:-0}" = "1" ]; then
  args+=(--run-all)
fi
if [ "${BUILDKITE_BRANCH:-}" = "main" ]; then
  args+=(--diff-base "HEAD~1")  # bootstrap-amd.sh: on main, the last commit's changes
elif [ "${BUILDKITE_PULL_REQUEST:-false}" != "false" ] && [ -n "${BUILDKITE_PULL_REQUEST_BASE_BRANCH:-}" ]; then
  args+=(--diff-base "origin/${BUILDKITE_PULL_REQUEST_BASE_BRANCH}")
else
  args+=(--run-all)  # no base to diff against: bootstrap-amd.sh falls back to run_all too
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out="$work/pipeline.yaml"
notes="$work/findings.md"
invoke pipeline.generate "${args[@]}" --out "$out" --annotation "$notes"

have_agent=0
command -v buildkite-agent >/dev/null 2>&1 && have_agent=1

if [ -s "$notes" ]; then
  if [ "$have_agent" = 1 ]; then
    buildkite-agent annotate --style warning --context rocmci-pipeline <"$notes"
  else
    echo "dry run: this annotation would be posted:" >&2
    cat "$notes" >&2
  fi
fi

if [ ! -s "$out" ]; then
  echo "no pipeline to upload (docs-only change)" >&2
  exit 0
fi
if [ "$have_agent" = 1 ]; then
  buildkite-agent pipeline upload "$out"
else
  echo "dry run: buildkite-agent not found; this pipeline would be uploaded:" >&2
  cat "$out"
fi
