"""asaptrace.analyze (see DESIGN.md)."""
