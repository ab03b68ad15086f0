"""asaptrace.replay.mechanics."""
