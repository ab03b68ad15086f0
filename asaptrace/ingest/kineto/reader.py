"""PyTorch profiler (Kineto) Chrome-trace JSON → canonical tables.

Accepts ``.json`` and ``.json.gz`` (gzip detected by content), a top-level object with
``traceEvents`` or a bare list of events; ``ts``/``dur`` as int, float or string µs (Chrome trace
times are µs whatever ``displayTimeUnit`` says — that key only sets the viewer's display unit and is
recorded in meta); ``baseTimeNanoseconds`` is added to every time when present (Kineto writes times
relative to it). Phases: complete ``X``; ``B``/``E`` pairs matched per (pid, tid); instants ``i``/``I``
/``R`` (dur 0); flows ``s``/``t``/``f`` (flows table); metadata ``M`` (streams table). Other phases
(counters ``C``, async ``b``/``e``/``n``, samples, objects) are counted as rejected with their phase
in the reason. Every event read is kept or rejected: ``read == kept + Σ rejected``.

Two decoders turn the bytes into the same per-event columns
(:class:`~asaptrace.ingest.kineto.decode.EventColumns`); everything after that — phase masks,
B/E matching, rejections, accounting, tables — is shared (:mod:`~asaptrace.ingest.kineto.tables`):

* the C scanner ``asaptrace.ingest.kineto._kscan`` (compiled by ``pip install``): one pass over the bytes
  into columnar buffers, no Python object per event. Times convert exactly from their decimal text
  (``1694128201435418.123`` µs → ``1694128201435418123`` ns, more than 3 decimals rounded half to
  even), also for JSON floats;
* msgspec (typed structs, ≈ 1 µs per event): the fallback when the extension is not built, and the
  path for files the strict C scanner declines — those are re-read by msgspec, so errors carry the
  same messages and odd-but-valid files read as before. JSON float times go through float64 here.

Set the environment variable ``ASAPTRACE_NO_CSCAN=1`` to force the msgspec path (to compare the two,
or to rule the extension out when chasing a problem).
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from asaptrace.errors import CorruptTrace
from asaptrace.ingest import columns as col
from asaptrace.ingest.base import Format, IngestOptions, IngestResult, register_format
from asaptrace.ingest.kineto import c_scanner_enabled, cscan, pieces, prefetch
from asaptrace.ingest.kineto.decode import EventColumns, decode_python, first_char
from asaptrace.ingest.kineto.merge import merge
from asaptrace.ingest.kineto.split import read_split
from asaptrace.ingest.kineto.tables import FORMAT_NAME, tables_of
from asaptrace.ingest.source import file_sha256, read_source_bytes


def sniff(path: Path, head: bytes) -> bool:
    """A Chrome-trace JSON that is not an Ascend timeline (those are claimed by their own format)."""
    text = head.lstrip()[:65536]
    if text[:1] == b"{":
        return b'"traceEvents"' in text or b'"schemaVersion"' in text or b'"distributedInfo"' in text
    if text[:1] == b"[":
        return b'"ph"' in text and b"Ascend" not in text and b'"CANN"' not in text
    return False


def read_kineto(path: str | Path, options: IngestOptions | None = None) -> IngestResult:
    """Read one Kineto trace file into canonical tables (rank column = -1; the driver fills it)."""
    with col.gc_paused():
        return _read_kineto(Path(path), options or IngestOptions())


def _read_kineto(path: Path, options: IngestOptions) -> IngestResult:
    if not _reads_in_pieces(path, options):
        return _read_whole(path, options)
    # a big file: never held whole, scanned on both cores, hashed as it is read (the driver does
    # not hash it: hashes_while_reading)
    sha256 = hashlib.sha256()
    if options.chunk_dir is not None:  # its plain host rows and flows written in chunks as they come
        try:
            return replace(
                read_split(path, options, Path(options.chunk_dir), sha256), sha256=sha256.hexdigest()
            )
        except pieces.NotInPieces:
            sha256 = hashlib.sha256()
    try:
        parts = pieces.read_in_pieces(path, max_bytes=options.max_decompressed_bytes, sha256=sha256)
    except pieces.NotInPieces:  # read whole, which says what is wrong with it, if anything
        return replace(_read_whole(path, options), sha256=file_sha256(path))
    cols = merge(parts)
    del parts  # the pieces' own columns: the joined ones replace them
    return replace(tables_of(cols, path), sha256=sha256.hexdigest())


def _reads_in_pieces(path: Path, options: IngestOptions) -> bool:
    """A big file not read ahead whole already (:func:`~asaptrace.ingest.kineto.pieces.in_pieces`):
    the reader hashes it as it reads it (the format's ``hashes_while_reading``)."""
    return prefetch.digest(path) is None and pieces.in_pieces(path, options)


def _read_whole(path: Path, options: IngestOptions) -> IngestResult:
    ahead = prefetch.take(path)  # read and scanned while the process was importing
    if ahead is not None and ahead.data is not None and len(ahead.data) <= options.max_decompressed_bytes:
        data = ahead.data
    else:
        ahead = None
        data = read_source_bytes(path, max_bytes=options.max_decompressed_bytes)
    if not first_char(data):
        raise CorruptTrace("file is empty", path=path)
    cols = decode_columns(data, path, ahead)
    del data, ahead  # the C path keeps no reference to the input (msgspec's Raw shapes do): freed here
    return tables_of(cols, path)


def decode_columns(data: bytes, path: Path, ahead: prefetch.Prefetched | None = None) -> EventColumns:
    """The file's per-event columns, from the C scanner when it is enabled and accepts the file
    (``ahead``: its scan of ``data``, made while the process was importing)."""
    if c_scanner_enabled() and not (ahead is not None and ahead.refused):
        cols = cscan.decode_c(data, path, ahead.scan if ahead is not None else None)
        if cols is not None:
            return cols
    return decode_python(data, path)


KINETO = register_format(
    Format(
        name=FORMAT_NAME,
        priority=10,
        sniff=sniff,
        suffixes=(".json", ".json.gz", ".gz"),
        read=read_kineto,
        hashes_while_reading=_reads_in_pieces,
        reads_in_chunks=_reads_in_pieces,
        description="PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz)",
    )
)
