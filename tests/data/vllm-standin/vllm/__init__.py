"""Stand-in for the vllm package (tests only)."""
