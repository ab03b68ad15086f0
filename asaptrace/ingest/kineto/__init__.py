"""The PyTorch profiler / Kineto Chrome-trace reader (registers format ``kineto``).

``reader`` builds the canonical tables; ``decode`` is the msgspec decoder and the column types
both decoders fill; ``cscan`` wraps the optional C scanner ``_kscan`` (compiled by ``pip install``).
"""

import importlib

__all__ = ["KINETO", "c_scanner_enabled", "read_kineto"]


def __getattr__(name: str) -> object:
    """The names above, imported on first use (importing the package stays cheap)."""
    if name in __all__:
        return getattr(importlib.import_module("asaptrace.ingest.kineto.reader"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
