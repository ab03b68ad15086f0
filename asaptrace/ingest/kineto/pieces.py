"""A big Kineto file read in pieces: never held whole, scanned on both cores.

A rank file of a few hundred steps is 0.5–2 GB of JSON. Read whole, its bytes sit beside their
scan (≈ 1.5× the file at the peak of the read) and one core scans them while the other waits.
Here the file (plain or gzip) is read in chunks; the C scanner's structural walk
(``_kscan.walk``: strings, escapes, bracket depth, nothing decoded) finds the commas *between two
events of the ``traceEvents`` array* — never one inside a string or a nested value — and the
events are cut there into pieces of about :func:`~asaptrace.ingest.kineto.piece_bytes` (32 MiB).
Each piece is wrapped into a document of its own (the first keeps the file's head, the last its
tail) and scanned on a second thread while the next is read (the scanner lets go of the GIL);
its columns are decoded at once and its bytes let go. :mod:`asaptrace.ingest.kineto.merge` joins the pieces' columns into
the columns of the whole file, so everything after that — B/E pairing in time order, ids in
order of first appearance, rejections, tables — is the one-piece code, and the store is the
same (``tests/test_kineto_pieces.py`` checks it at awkward cuts).

The cut is structural, and every piece is still parsed strictly; whatever does not fit the plan —
no ``traceEvents`` array found in the head, a second ``traceEvents`` key in the tail, a piece the
strict scanner refuses, integers too long for it — raises :class:`NotInPieces`, and the reader
reads the file whole as before (which then gives the usual error message, with the byte offset
in the whole file). Files whose whole read would not keep the ingest's memory budget, and a lone
file over 128 MiB to enrich, are read this way (:func:`in_pieces`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from asaptrace.executors import ahead_in_order
from asaptrace.ingest.base import IngestOptions
from asaptrace.ingest.kineto import c_scanner, cscan, piecewise_from
from asaptrace.ingest.kineto import piece_bytes as kineto_piece_bytes
from asaptrace.ingest.kineto.merge import Piece
from asaptrace.ingest.source import GZIP_RATIO, is_gzip, read_source_chunks

#: Pieces scanned at once (the scanner releases the GIL: both cores).
SCAN_THREADS = 2

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


class NotInPieces(Exception):
    """The file does not fit the piecewise plan: the reader reads it whole."""


def in_pieces(path: Path, options: IngestOptions) -> bool:
    """Whether ``path`` is read in pieces: the C scanner is on and the file (inflated: gzip ×10) is
    larger than ``options.piecewise_from`` (the largest file whose whole read keeps the memory
    budget; for a lone file to enrich, at most 128 MiB: :func:`~asaptrace.memory.piecewise_limit`)
    and than two pieces. Smaller files are read whole: read while the process imports, a file of
    0.1 GB is ingested faster whole (docs/performance.md)."""
    try:
        size = path.stat().st_size * (GZIP_RATIO if is_gzip(path) else 1)  # what it holds inflated
    except OSError:
        return False
    return c_scanner() is not None and size > max(
        piecewise_from(options.piecewise_from), 2 * kineto_piece_bytes()
    )


def read_in_pieces(
    path: Path, *, max_bytes: int, piece_bytes: int | None = None, sha256: Any = None
) -> list[Piece]:
    """The columns of each piece of ``path``, in file order (see :func:`scan_pieces`)."""
    return list(scan_pieces(path, max_bytes=max_bytes, piece_bytes=piece_bytes, sha256=sha256))


def scan_pieces(
    path: Path,
    *,
    max_bytes: int,
    piece_bytes: int | None = None,
    sha256: Any = None,
    then: Callable[[Piece, int], Any] | None = None,
) -> Iterator[Any]:
    """The columns of each piece of ``path``, in file order, each as soon as it is scanned (raises
    :class:`NotInPieces` when the file must be read whole; the usual
    :class:`~asaptrace.errors.IngestError` for a file that cannot be read or is over
    ``max_bytes``). ``sha256`` (a hashlib object) is fed the file's bytes on disk as they are
    read: the driver reads the file once. ``then(piece, i)``, when given, runs on the scanning
    thread on each piece (``i``: its place) and its answer is yielded instead."""
    piece = piece_bytes or kineto_piece_bytes()
    docs = documents(read_source_chunks(path, max_bytes=max_bytes, chunk=piece, sha256=sha256), piece)

    def scanned(item: tuple[int, bytes]) -> Any:
        i, doc = item
        return _scan(doc, path) if then is None else then(_scan(doc, path), i)

    yield from ahead_in_order(scanned, enumerate(docs), workers=SCAN_THREADS, name="asaptrace-piece")


def _scan(doc: bytes, path: Path) -> Piece:
    scanner = c_scanner()
    if scanner is None:
        raise NotInPieces("the C scanner was switched off")
    try:
        res = scanner.scan(doc)
    except ValueError as err:
        raise NotInPieces(str(err)) from None
    if res["huge_ints"] or not res["has_events"]:
        raise NotInPieces("a piece the C scanner cannot take")
    cols = cscan.decode_c(doc, path, res)
    if cols is None:  # pragma: no cover - decode_c declines only for the reasons checked above
        raise NotInPieces("a piece the C scanner cannot take")
    return Piece(cols, frozenset(k for k, span in res["header"].items() if span is not None))


def documents(chunks: Iterator[bytes], piece_bytes: int) -> Iterator[bytes]:
    """The pieces of one Chrome-trace document given in ``chunks``, each a document of its own:
    the first holds the head and the first events, the last the last events and the tail; the
    events are cut only between two elements of the ``traceEvents`` array (or the top-level
    list). One piece (the document unchanged) when it is short."""
    it = iter(chunks)
    head = bytearray()
    for data in it:  # the head: up to the events array's opening bracket
        head += data
        start = _events_start(head)
        if start is not None:
            break
        if len(head) > 2 * piece_bytes:
            raise NotInPieces("no traceEvents array near the head of the file")
    else:
        yield bytes(head)  # short, or no events array: the whole read says what it holds
        return
    is_list, start = start
    prefix, suffix = (b"[", b"]") if is_list else (b'{"traceEvents":[', b"]}")
    level = 1 if is_list else 2
    walker = c_scanner()
    if walker is None:
        raise NotInPieces("the C scanner was switched off")
    # the head walked too: the array found must open at the top level, outside any string
    _, in_string, _, depth, _, _ = walker.walk(memoryview(head)[:start], 0, 0, 0, -1, 0, 0)
    if in_string or depth != level:
        raise NotInPieces("the traceEvents key found is not the top-level one")
    state = (0, 0, level, level, piece_bytes, 0)  # in_string, escape, depth, level, min_gap, since
    carry: list[bytes | memoryview] = [bytes(head[:start])]  # the piece being gathered (the first: the head)
    pending = memoryview(bytes(head[start:]))
    del head
    first = True
    tail_at = -1  # where, in the last piece, the tail after the events array begins
    while True:
        if tail_at < 0 and len(pending):
            cuts, in_string, escape, depth, since, end = walker.walk(pending, *state)
            state = (in_string, escape, depth, level, piece_bytes, since)
            at = 0
            for cut in cuts:  # one copy per piece: its parts joined with the wrapping
                yield b"".join(([] if first else [prefix]) + carry + [pending[at : cut - 1], suffix])
                first, carry, at = False, [], cut  # the comma between the two events dropped
            if end >= 0:
                tail_at = sum(len(c) for c in carry) + end - at
            carry.append(pending[at:])
        elif len(pending):
            carry.append(pending)
        data = next(it, None)
        if data is None:
            break
        pending = memoryview(data)
    last = b"".join(carry) if first else b"".join([prefix, *carry])
    del carry
    if tail_at >= 0 and last.find(b'"traceEvents"', tail_at + (0 if first else len(prefix))) >= 0:
        raise NotInPieces("a second traceEvents key after the events array")
    yield last


def _events_start(head: bytearray) -> tuple[bool, int] | None:
    """(top-level list?, offset just past the events array's ``[``) once ``head`` shows it, else
    None. The object form's key is taken at its first match; the walk of the first piece and its
    strict scan check that it is the top-level one."""
    stripped = head.lstrip()
    if not stripped:
        return None
    if stripped[:1] == b"[":
        return True, len(head) - len(stripped) + 1
    m = _EVENTS_KEY.search(head)
    if m is None:
        return None
    return False, m.end()
