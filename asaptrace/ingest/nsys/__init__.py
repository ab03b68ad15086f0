"""The Nsight Systems SQLite export reader (registers format ``nsys``).

Modules:

* ``reader`` — the format: opens the export, reads it into canonical tables, balances the accounting;
* ``schema`` — probes the export's tables and columns (is it nsys? which schema version?);
* ``events`` — reads the kernel, memcpy/memset, CUDA runtime and NVTX tables into event parts;
* ``strings`` — the export's string table, looked up in bulk;
* ``streams`` — the streams table (GPU streams named as Kineto names them, host threads by name);
* ``rank`` — which rank, world size, host and device the export is.
"""

import importlib

__all__ = ["NSYS", "read_nsys"]


def __getattr__(name: str) -> object:
    """The names above, imported on first use (importing the package stays cheap)."""
    if name in __all__:
        return getattr(importlib.import_module("asaptrace.ingest.nsys.reader"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
