"""asaptrace.replay (see DESIGN.md)."""
