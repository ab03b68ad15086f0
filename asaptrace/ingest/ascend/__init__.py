"""The Ascend torch_npu / msprof reader (registers format ``ascend``).

``reader`` reads a rank's timeline and groups a rank folder into one source; ``companions`` finds
and reads ``kernel_details.csv`` / ``communication.json``; ``merge`` folds them into the timeline;
``links`` binds launches to device tasks through the profiler's flow arrows.
"""

import importlib

__all__ = ["ASCEND", "ascend_sources", "read_ascend"]


def __getattr__(name: str) -> object:
    """The names above, imported on first use (importing the package stays cheap)."""
    if name in __all__:
        return getattr(importlib.import_module("asaptrace.ingest.ascend.reader"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
