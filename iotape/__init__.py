"""iotape: record, replay and analyze block I/O traces."""

__version__ = "0.1.0"
