"""What every component shares and nothing else: the user error type, the progress
bar, atomic file writes and the version. It imports no other iotape package."""

__version__ = "0.1.0"
