"""Memory of an ingest: freed memory given back to the system, and the budget's estimates.

glibc's malloc serves a request of 128 KiB or more with a mapping of its own, returned to the
system when freed, but it raises that threshold to the size of every such block freed (up to
32 MiB). After the first large buffer of a scan is freed, the next ones — the scanner's column
buffers, numpy arrays, msgspec objects, the reading threads' work — land in the heap arenas,
which keep their pages when freed. On one 0.5 GB rank file that is ≈ 350 MB of peak RSS held but
unused (benchmarks/ingest_bigfile.py: 1565 → 1220 MB peak, the same time). :func:`keep_mmap_threshold`
fixes the threshold, as ``MALLOC_MMAP_THRESHOLD_`` would. Other C libraries (musl, macOS) do not
have this behaviour, and there it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys

#: glibc's ``M_MMAP_THRESHOLD`` parameter number (``malloc.h``).
_M_MMAP_THRESHOLD = -3

#: Requests of this size or more get a mapping of their own (glibc's initial default).
MMAP_THRESHOLD = 128 * 1024

_done = False


def keep_mmap_threshold() -> bool:
    """Fix glibc malloc's mmap threshold at :data:`MMAP_THRESHOLD` for the rest of the process
    (once; left alone when the user set ``MALLOC_MMAP_THRESHOLD_``). Returns whether it is set."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux") or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return _done


def give_back() -> None:
    """Return the pages freed so far to the system: Arrow's pool lets go of its unused blocks and
    glibc trims its heaps. Called between the phases of an ingest (after the reading, before the
    run-wide decision), where the last phase's buffers are all freed and the next would otherwise
    grow beside their pages (32 ranks × 10 steps: −20 MB of peak RSS, no time measurable)."""
    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc
            ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


#: The ingest's default memory budget (``asaptrace ingest --memory-budget``).
DEFAULT_BUDGET = 1024**3

#: What a process holds once it has imported what an ingest needs (numpy, pyarrow, polars,
#: msgspec, the enrichment): 95–130 MB measured, before a byte of a trace is read.
IMPORT_BYTES = 130 * 1024**2

#: Peak bytes per (decompressed) byte of a rank file read whole: its bytes and scan, then its
#: tables and its segmentation's working set (benchmarks/ingest_bigfile.py, a real trace's steps
#: repeated: 130 MB + 1.9× at 0.5 GB, + 1.6× at 2 GB).
PEAK_PER_BYTE = 1.9


def whole_file_peak(size: int) -> int:
    """The peak RSS of ingesting one rank file of ``size`` (decompressed) bytes read whole and
    segmented whole: it grows with the file."""
    return IMPORT_BYTES + int(size * PEAK_PER_BYTE)


def whole_file_limit(budget: int) -> int:
    """The largest file (decompressed bytes) whose whole read keeps within ``budget``
    (:func:`whole_file_peak`): a larger Kineto file is read in pieces, its host rows in chunks
    (1 GiB: 470 MiB)."""
    return max(0, int((budget - IMPORT_BYTES) / PEAK_PER_BYTE))


#: A big Kineto rank read in chunks (asaptrace.chunks): its plain host rows are never held
#: whole, but its device work, annotations and flows (≈ 15 % of the rows) and 4 bytes per host row
#: are, beside two pieces in flight (benchmarks/ingest_bigfile.py: 525 MB at 0.5 GB, 959 MB at
#: 2 GB, so ≈ 250 MB + 0.29× the file beyond the imports).
CHUNKED_BYTES = 250 * 1024**2
CHUNKED_PER_BYTE = 0.29


def chunked_peak(size: int) -> int:
    """The peak RSS of ingesting one Kineto rank file of ``size`` bytes read in chunks."""
    return IMPORT_BYTES + CHUNKED_BYTES + int(size * CHUNKED_PER_BYTE)


def over_budget(budget: int, largest: int, *, chunked: bool = False) -> int | None:
    """The expected peak when the largest file (``largest`` decompressed bytes; ``chunked``: read
    in chunks) cannot be ingested within ``budget``; None when it can."""
    peak = chunked_peak(largest) if chunked else whole_file_peak(largest)
    return peak if peak > budget else None
