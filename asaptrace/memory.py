"""Memory of an ingest: glibc's malloc told how to keep and give back pages, and the budget's estimates.

Two of glibc's malloc defaults cost an ingest dearly, one in memory and one in time:

- **The mmap threshold.** A request of 128 KiB or more gets a mapping of its own, returned to the
  system when freed, but glibc raises that threshold to the size of every such block freed (up to
  32 MiB). After the first large buffer of a scan is freed, the next ones — the scanner's column
  buffers, numpy arrays, msgspec objects — land in the heap arenas, which keep their pages when
  freed: on one 0.5 GB rank file ≈ 350 MB of peak RSS held but unused (1565 → 1220 MB peak,
  the same time). :func:`tune_malloc` fixes the threshold at 128 KiB, as
  ``MALLOC_MMAP_THRESHOLD_`` would.
- **The top pad.** A heap grows by what a request needs and gives back its free top as soon as it
  passes 128 KiB, so a loop that allocates and frees a few MiB at a time takes fresh pages from
  the kernel again and again: each is a page fault and a page of zeros. On this project's 2-core
  VM a 2 GB rank file took 2.8 M faults and 7.9–8.7 s of system time in 17.5–18.7 s. Each heap
  now keeps :func:`top_pad` (the budget / 32: 32 MiB at the default 1 GiB) of room at its top,
  as ``MALLOC_TOP_PAD_`` would: 1.1–1.2 M faults, 15.6–15.8 s, +5–30 MB of peak RSS (8 files of
  40 MB: 0.39 → 0.25 M faults, −3 %; docs/executors.md). A larger pad buys little more time for
  more memory (64 MiB: +30–50 MB), and every thread's heap keeps one.

Other C libraries (musl, macOS) have neither behaviour, and there this does nothing; a value the
user set in the environment is left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys

#: glibc's ``mallopt`` parameter numbers (``malloc.h``).
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

#: Requests of this size or more get a mapping of their own (glibc's initial default).
MMAP_THRESHOLD = 128 * 1024

#: The ingest's default memory budget (``asaptrace ingest --memory-budget``).
DEFAULT_BUDGET = 1024**3

#: Each glibc heap keeps this share of the memory budget as free room at its top.
TOP_PAD_SHARE = 1 / 32


def top_pad(budget: int) -> int:
    """The free room each heap keeps at its top under ``budget`` (32 MiB at 1 GiB, at most 256 MiB)."""
    return max(0, min(int(budget * TOP_PAD_SHARE), 256 * 1024**2))


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has ``mallopt`` and ``malloc_trim``), else None. Looked up
    once: ``find_library`` runs ``ldconfig`` (≈ 2 ms), and :func:`give_back` is called per file."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes, libc.mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        libc.malloc_trim.argtypes, libc.malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):  # not glibc
        return None
    return libc


def tune_malloc(budget: int = DEFAULT_BUDGET) -> bool:
    """Fix glibc malloc's mmap threshold at :data:`MMAP_THRESHOLD` and its top pad at
    :func:`top_pad` of ``budget`` for the rest of the process (each left alone when the user set
    ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_TOP_PAD_``). Returns whether the threshold is set."""
    libc = _glibc()
    if libc is None:
        return False
    if "MALLOC_TOP_PAD_" not in os.environ:
        libc.mallopt(_M_TOP_PAD, top_pad(budget))
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1)


def give_back() -> None:
    """Return the pages freed so far to the system: Arrow's pool lets go of its unused blocks and
    glibc trims its heaps, their top pad too (the next phase takes it again, once). Called between
    the phases of an ingest (after the reading, before the run-wide decision), where the last
    phase's buffers are all freed and the next would otherwise grow beside their pages (32 ranks ×
    10 steps: −20 MB of peak RSS, no time measurable)."""
    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)


#: What a process holds once it has imported what an ingest needs (numpy, pyarrow, polars,
#: msgspec, the enrichment): 95–130 MB measured, before a byte of a trace is read.
IMPORT_BYTES = 130 * 1024**2

#: Peak bytes beyond the imports that a rank file read whole holds whatever its size (the
#: enrichment's pools and working set, the read-ahead's), and per (decompressed) byte of it: its
#: bytes and scan, its tables and its segmentation. Fitted on lone files of 40 MB – 0.5 GB read
#: whole (2026-12-02: 276, 436, 710 and 1,020 MiB at 38, 95, 238 and 478 MiB; the model says
#: 342, 436, 672 and 1,068). The fit of 130 MB + 1.9× before it, made on 0.5–2 GB files, left out
#: the fixed part: a 40 MB file peaked 70 MB over it.
WHOLE_FILE_BYTES = 150 * 1024**2
PEAK_PER_BYTE = 1.65

#: What an ingest of several rank files that enriches holds beyond one file's read, per byte of
#: its largest file: after the last file, its writing pass makes two ranks' final tables while up
#: to six parts are encoded. Fitted on folders read one file at a time (2026-12-02: 8 × 40 MB
#: 395–401 MiB, 4 × 150 MB 691 MiB, 2 × 250 MB 1,021 MiB read whole and 752 MiB in pieces; the
#: model says 395, 716, 1,005 and 772).
SEVERAL_FILES_PER_BYTE = 1.4


def _several(size: int, several: bool) -> int:
    return int(size * SEVERAL_FILES_PER_BYTE) if several else 0


def whole_file_peak(size: int, *, several: bool = False) -> int:
    """The peak RSS of ingesting one rank file of ``size`` (decompressed) bytes read whole and
    segmented whole (``several``: as the largest of several files of an ingest that enriches): it
    grows with the file."""
    return shared_bytes() + read_share(size) + _several(size, several)


def read_share(size: int) -> int:
    """What one rank file of ``size`` (decompressed) bytes read whole adds to the peak of an ingest
    that reads it beside others: :func:`whole_file_peak` but for its fixed part (the imports and
    the enrichment's pools and working set: :func:`shared_bytes`), which the process pays once
    however many files it reads at once."""
    return int(size * PEAK_PER_BYTE)


def shared_bytes() -> int:
    """The part of an ingest's peak that does not grow with the files read at once (see :func:`read_share`)."""
    return IMPORT_BYTES + WHOLE_FILE_BYTES


def whole_file_limit(budget: int, *, several: bool = False) -> int:
    """The largest file (decompressed bytes) whose whole read keeps within ``budget``
    (:func:`whole_file_peak`): a larger Kineto file is read in pieces, its host rows and flows in
    chunks (1 GiB: 450 MiB; 243 MiB for one of several files of an ingest that enriches)."""
    per_byte = PEAK_PER_BYTE + (SEVERAL_FILES_PER_BYTE if several else 0)
    return max(0, int((budget - shared_bytes()) / per_byte))


#: A lone rank file over this (decompressed) is read in pieces, its host rows and flows in chunks,
#: even when its whole read would keep the budget, in an ingest that enriches: both cores work on
#: it and its peak is the chunked one (250 MB: 2.41–2.45 s at 480 MB in pieces, 2.57–2.62 s at
#: 780 MB whole). Smaller files are read whole, the read begun while the process imports (100 MB:
#: 1.36–1.59 s whole, 1.58–1.76 s in pieces); several files already keep both cores busy (4 × 150 MB:
#: 4.07–4.13 s whole, 4.24–4.28 s in pieces, the same peak); and without the enrichment's chunks
#: the pieces are joined whole (250 MB: 1.54–1.88 s whole, 2.04–2.26 s in pieces).
LONE_FILE_PIECEWISE = 128 * 1024**2


def piecewise_limit(budget: int, *, enriched_files: int = 0) -> int:
    """Bytes (decompressed) over which a Kineto rank file of an ingest of ``enriched_files`` files
    that enriches (0: an ingest that does not) is read in pieces: the largest whole read that keeps
    ``budget`` (:func:`whole_file_limit`, as one of several files when there are several), and at
    most :data:`LONE_FILE_PIECEWISE` for the only one."""
    limit = whole_file_limit(budget, several=enriched_files > 1)
    return min(limit, LONE_FILE_PIECEWISE) if enriched_files == 1 else limit


#: A big Kineto rank read in chunks (asaptrace.chunks): its plain host rows and flows are never
#: held whole, but its device work and annotations (≈ 10 % of the rows) are, with 4 bytes per host
#: row and the launches its kernels still ask for while it is segmented, beside two pieces in
#: flight (benchmarks/ingest_bigfile.py: 496–526 MB at 0.5 GB, where the read's own floor is the
#: peak; 830 MB at 2 GB and 1,057 MB at 3 GB, where the segmentation of the rest is: so ≈ 250 MB
#: + 0.25× the file beyond the imports, a little over at the large end).
CHUNKED_BYTES = 250 * 1024**2
CHUNKED_PER_BYTE = 0.25


def chunked_peak(size: int, *, several: bool = False) -> int:
    """The peak RSS of ingesting one Kineto rank file of ``size`` bytes read in chunks
    (``several``: as the largest of several files of an ingest that enriches)."""
    return IMPORT_BYTES + CHUNKED_BYTES + int(size * CHUNKED_PER_BYTE) + _several(size, several)


def over_budget(budget: int, largest: int, *, chunked: bool = False, several: bool = False) -> int | None:
    """The expected peak when the largest file (``largest`` decompressed bytes; ``chunked``: read
    in chunks; ``several``: one of several files of an ingest that enriches) cannot be ingested
    within ``budget``; None when it can."""
    peak = chunked_peak(largest, several=several) if chunked else whole_file_peak(largest, several=several)
    return peak if peak > budget else None
