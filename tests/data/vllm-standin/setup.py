# Stand-in for vLLM's setup.py (tests only): its presence marks the folder as a vLLM checkout.
