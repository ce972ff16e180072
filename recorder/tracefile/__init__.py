"""The `.iot` trace-file library: read, write, scan, check and repair, describe, convert."""
