"""The ROCm image: its Dockerfile's declared inputs, the pure build plan, and its execution."""
