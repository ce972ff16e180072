"""The hybrid lab's devices, for the bench scripts, tests and `make demo` that import
them from here: the implementation is analyzer/lab/devices.py (`iotape lab hybrid`
uses it too)."""

from analyzer.lab.devices import BLKIO, HybridLab, LabError, backing_disk

__all__ = ["BLKIO", "HybridLab", "LabError", "backing_disk"]
