"""asaptrace.viz (see DESIGN.md)."""
