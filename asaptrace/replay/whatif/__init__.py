"""asaptrace.replay.whatif."""
