"""Importers: traces recorded by other tools (blktrace, blkparse, SNIA, SPC, ...) -> `.iot`."""
