"""The PyTorch profiler / Kineto Chrome-trace reader (registers format ``kineto``).

Modules:

* ``reader`` — the format: bytes → per-event columns → tables (whole, in pieces, or split);
* ``tables`` — per-event columns → the events, args, flows and streams tables, with balanced accounting;
* ``decode`` — the msgspec decoder and the column types both decoders fill;
* ``cscan`` — wraps the optional C scanner ``_kscan`` (compiled by ``pip install``);
* ``prefetch`` — reads and scans the first files while ``asaptrace ingest`` is still importing;
* ``pieces`` — a big file read in pieces cut between events, scanned on both cores;
* ``merge`` — the pieces' columns joined into the columns of the whole file;
* ``split`` — a big file's plain host rows and flows written in chunks as its pieces come (the rest joined);
* ``dictionary`` — helpers over the dictionary-encoded columns every table builder shares;
* ``flows``, ``streams``, ``args`` — the flows, streams and args tables beside the events;
* ``rank`` — which rank and device a file is (``distributedInfo``, ``deviceProperties``).
"""

import importlib
import os
from types import ModuleType

__all__ = ["KINETO", "c_scanner_enabled", "read_kineto"]
_LAZY = ("KINETO", "read_kineto")


def c_scanner() -> ModuleType | None:
    """The C scanner ``_kscan`` when the Kineto reader uses it: built, and not switched off by
    ``ASAPTRACE_NO_CSCAN`` (read at each call, so a test or a user can flip it at run time).
    Imports no numpy, pyarrow nor polars: the read-ahead asks before they are imported."""
    if os.environ.get("ASAPTRACE_NO_CSCAN", "") not in ("", "0"):
        return None
    try:
        from asaptrace.ingest.kineto import _kscan
    except ImportError:  # not built (no compiler at install time): the msgspec path reads every file
        return None
    return _kscan


#: A piece of a big file: 32 MiB, up to 64 MiB for a file over 1 GiB (about 32 pieces). Fewer,
#: larger pieces mean fewer chunks for the enrichment's passes over them: a 2 GB rank in 64 MiB
#: pieces 9.7–10.0 s at 800–848 MB, in 32 MiB 10.3–10.4 s at 800–816 MB; at 0.25–0.5 GB the
#: larger pieces gain nothing and cost 90–180 MB of peak; 96–128 MiB were slower and larger.
PIECE_BYTES = 32 * 1024**2
PIECE_BYTES_MAX = 64 * 1024**2


def piece_bytes(size: int | None = None) -> int:
    """Bytes of JSON per piece of a big file of ``size`` bytes (decompressed; None: the smallest
    piece): :data:`PIECE_BYTES`, up to :data:`PIECE_BYTES_MAX` for about 32 pieces, or
    ``ASAPTRACE_PIECE_MB`` when set (read at each call). A file over :func:`piecewise_from` and
    over two pieces is read in pieces (:mod:`asaptrace.ingest.kineto.pieces`)."""
    if forced := os.environ.get("ASAPTRACE_PIECE_MB", ""):
        return max(1, int(float(forced) * 1024**2))
    return PIECE_BYTES if size is None else min(PIECE_BYTES_MAX, max(PIECE_BYTES, size // 32))


def piecewise_from(budget: int) -> int:
    """Bytes (decompressed) over which a file is read in pieces: ``budget`` (the options' size over
    which a whole read would not keep the ingest's memory budget),
    or ``ASAPTRACE_PIECEWISE_MB`` when set (to read small files in pieces: tests, diagnosis)."""
    forced = os.environ.get("ASAPTRACE_PIECEWISE_MB", "")
    return int(float(forced) * 1024**2) if forced else budget


def c_scanner_enabled() -> bool:
    """Whether :func:`read_kineto` tries the C scanner (:func:`c_scanner`)."""
    return c_scanner() is not None


def __getattr__(name: str) -> object:
    """The names above, imported on first use (importing the package stays cheap)."""
    if name in _LAZY:
        return getattr(importlib.import_module("asaptrace.ingest.kineto.reader"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
