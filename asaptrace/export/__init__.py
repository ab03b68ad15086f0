"""asaptrace.export (see DESIGN.md)."""
