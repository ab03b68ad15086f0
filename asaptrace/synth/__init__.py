"""asaptrace.synth (see DESIGN.md)."""
