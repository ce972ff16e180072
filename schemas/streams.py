"""The reference workload's streams, grouped: one definition for its report, the
ingest of that report and the replayer's scaling (trace_record.toml [stream_group])."""

from __future__ import annotations

from schemas import stream_group

# Counted in the achieved transactional IOPS.
TRANSACTIONAL = stream_group("transactional")
# In every database's section of a workload report (the Jetstress table).
REPORTED = stream_group("reported")
# The rest the engine accounts (the report's background section).
BACKGROUND = stream_group("background")
# Every stream the engine accounts, in the order a report lists them.
ENGINE = REPORTED + BACKGROUND
# Scaling to N mailboxes on K databases with C copies.
PER_MAILBOX = frozenset(stream_group("per_mailbox"))
PER_DATABASE = frozenset(stream_group("per_database"))
PER_COPY = frozenset(stream_group("per_copy"))
