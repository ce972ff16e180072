"""The one error type that library code raises for a user's mistake or bad input.

The CLI turns it into a one-line message and a non-zero exit; anything else is
a bug: the CLI prints one line and writes the traceback to a report file
(iotape/crash.py).
"""


class IotapeError(Exception):
    """A problem the user can fix: bad input, a wrong option, a missing device."""

    exit_code = 2
