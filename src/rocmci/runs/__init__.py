"""Runs: workloads (what to run), container and host execution, evidence-based workarounds, results.

Empty on purpose: importing `rocmci.runs` stays cheap; import the module you need.
"""
