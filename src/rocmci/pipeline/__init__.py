"""vLLM-style step files -> Buildkite pipeline, and validation of both."""
