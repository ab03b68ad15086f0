"""Source-format ingesters.

Each format is a sub-package that registers a :class:`~asaptrace.ingest.base.Format` declaring its
detection priority, how it groups files into one source and how a rank is read from a path; the
driver asks the registry only, so import order does not matter. The registry imports the built-in
formats on its first lookup, and the names below are imported on first use: importing the
package (or :mod:`asaptrace.ingest.kineto.prefetch`) imports no numpy, pyarrow nor polars.

Modules, in the order data flows through them: ``discovery`` (which named files are traces, one run?),
``source`` (a file's bytes, gzip detected, decompression capped), ``base`` (the format registry,
what a reader returns), one sub-package per format (``kineto``, ``ascend``, ``nsys``) with
``columns`` (Arrow columns from lists) shared by the JSON readers, ``naming`` and ``ranks`` (which
rank a file is), ``driver`` (read in parallel, resolve ranks, write one store).
"""

import importlib

__all__ = ["FORMATS", "Format", "IngestOptions", "IngestResult", "detect_format", "register_format"]


def __getattr__(name: str) -> object:
    """The names above, imported on first use (importing the package stays cheap)."""
    if name in __all__:
        return getattr(importlib.import_module("asaptrace.ingest.base"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
