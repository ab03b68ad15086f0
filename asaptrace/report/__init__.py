"""asaptrace.report (see DESIGN.md)."""
