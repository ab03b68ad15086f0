"""asaptrace.enrich (see DESIGN.md)."""
