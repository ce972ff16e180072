"""iotape: the command line. It imports every component; none imports it."""

from base import __version__

__all__ = ["__version__"]
