"""Capture: the loader's Python side, the bpftrace and ftrace backends, devices, stream labels."""
