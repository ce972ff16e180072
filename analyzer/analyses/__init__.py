"""Analyses over stored runs: latency, time series, verdicts, run-vs-run comparison, history."""
