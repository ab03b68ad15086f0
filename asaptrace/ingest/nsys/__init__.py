"""The Nsight Systems SQLite export reader (registers format ``nsys``).

``schema`` probes the export (which tables and columns it has); ``reader`` turns it into canonical tables.
"""

import importlib

__all__ = ["NSYS", "read_nsys"]


def __getattr__(name: str) -> object:
    """The names above, imported on first use (importing the package stays cheap)."""
    if name in __all__:
        return getattr(importlib.import_module("asaptrace.ingest.nsys.reader"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
