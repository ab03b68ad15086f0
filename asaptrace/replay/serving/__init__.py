"""asaptrace.replay.serving."""
