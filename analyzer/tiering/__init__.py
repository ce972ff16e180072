"""The tiering simulator: what an SSD tier or SSD cache would have done with a trace."""
