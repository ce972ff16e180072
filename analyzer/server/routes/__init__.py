"""One module per group of endpoints."""
