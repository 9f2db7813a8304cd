"""Stand-in for vLLM test utilities (tests only)."""
