"""A replay spread over several hosts through fio's client/server mode."""
