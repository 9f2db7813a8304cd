// stand-in for vLLM's HIP/C++ sources: csrc-build copies this folder
