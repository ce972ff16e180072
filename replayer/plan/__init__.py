"""Planning a replay: a trace -> a directory of fio job files (exact, synthetic, scaled, split)."""
