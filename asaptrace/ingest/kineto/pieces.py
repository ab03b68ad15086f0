"""A big Kineto file read in pieces: never held whole, scanned on both cores.

A rank file of a few hundred steps is 0.5–2 GB of JSON. Read whole, its bytes sit beside their
scan (≈ 1.5× the file at the peak of the read) and one core scans them while the other waits.
Here the file (plain or gzip) is read in chunks; the C scanner's structural walk
(``_kscan.walk``: strings, escapes, bracket depth, nothing decoded) finds the commas *between two
events of the ``traceEvents`` array* — never one inside a string or a nested value — and the
events are cut there into pieces of about :func:`~asaptrace.ingest.kineto.piece_bytes` (32 MiB, up to
64 MiB for a file over 1 GiB).
Each piece is wrapped into a document of its own (the first keeps the file's head, the last its
tail) and scanned on a second thread while the next is read (the scanner lets go of the GIL);
its columns are decoded at once and its bytes let go. A plain file is read straight into each
piece's buffer, used again for a later piece once this one is scanned, and hashed on a thread of
its own (:func:`plain_documents`); a gzip file is inflated in chunks that the pieces are joined
from (:func:`documents`). :mod:`asaptrace.ingest.kineto.merge` joins the pieces' columns into
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

import os
import queue
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from asaptrace.errors import IngestError
from asaptrace.executors import ahead_in_order
from asaptrace.ingest.base import IngestOptions
from asaptrace.ingest.kineto import c_scanner, cscan, piecewise_from
from asaptrace.ingest.kineto import piece_bytes as kineto_piece_bytes
from asaptrace.ingest.kineto.merge import Piece
from asaptrace.ingest.source import GZIP_RATIO, is_gzip, over_cap, read_source_chunks

#: Pieces scanned at once (the scanner releases the GIL: both cores).
SCAN_THREADS = 2

#: A plain file is read into its piece's buffer this much at a time (at most a piece), each step
#: walked as it comes.
READ_STEP = 4 * 1024**2

#: A piece as :func:`scan_pieces` hands it to a scanning thread: its bytes, and what gives its
#: buffer back once it is scanned (None: nothing to give back).
Doc = tuple[bytes | memoryview, Callable[[], None] | None]

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_LEADING_SPACE = re.compile(rb"\s*")  # what bytes.lstrip() strips: space, \t, \n, \r, \v, \f


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
    docs: Iterator[Doc]
    try:
        gz = is_gzip(path)
        size = path.stat().st_size * (GZIP_RATIO if gz else 1)  # what it holds inflated
    except OSError as err:
        raise IngestError(f"cannot read file ({err.strerror or err})", path=path) from None
    piece = piece_bytes or kineto_piece_bytes(size)
    if gz:
        chunks = read_source_chunks(path, max_bytes=max_bytes, chunk=piece, sha256=sha256)
        docs = ((doc, None) for doc in documents(chunks, piece))
    else:
        docs = plain_documents(path, piece, max_bytes=max_bytes, sha256=sha256)

    def scanned(item: tuple[int, Doc]) -> Any:
        i, (doc, give_back) = item
        try:
            piece_cols = _scan(doc, path)
        finally:
            del doc
            if give_back is not None:
                give_back()  # the buffer goes to a later piece while this one is split
        return piece_cols if then is None else then(piece_cols, i)

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
    prefix, suffix, level, walker = _wrapping(memoryview(head), start)
    start = start[1]
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


class _Buffers:
    """The pieces' buffers, each used again once its piece is scanned. A new ``bytes`` of 32 MiB
    per piece was a new mapping to fault in, twice (read, then joined with its wrapping): on a
    2 GB file 1.0 M page faults, and 4.1 s of the 6.3 s the reading thread took before the scans
    could start (``readinto`` a buffer used again: 0.36 s for the 2 GB)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.free: list[bytearray] = []
        self.lock = threading.Lock()

    def get(self) -> bytearray:
        with self.lock:
            return self.free.pop() if self.free else bytearray(self.size)

    def lend(self, buf: bytearray, end: int) -> Doc:
        """``buf[:end]``, and what gives ``buf`` back: not while any view of it still lives (the
        piece's bytes must never change under a reader), which a bytearray tells by refusing to
        grow."""
        view = memoryview(buf)[:end]

        def give_back() -> None:
            try:
                view.release()
                buf.append(0)
            except BufferError:  # something still holds a view of it: it keeps the buffer
                return
            buf.pop()
            with self.lock:
                self.free.append(buf)

        return view, give_back


class _Hasher:
    """A hash fed on a thread of its own (hashlib lets go of the GIL): the reading thread walks
    the next bytes meanwhile (on a 2 GB file sha256 is ≈ 1.5 s of a core). A buffer must not be
    written to, or grown, until what was fed from it is hashed: :meth:`wait`."""

    def __init__(self, sha256: Any) -> None:
        self.sha256 = sha256
        self.queue: queue.SimpleQueue[memoryview | None] = queue.SimpleQueue()
        self.fed = self.hashed = 0
        self.done = threading.Condition()
        self.thread = threading.Thread(target=self._run, name="asaptrace-hash", daemon=True)
        self.thread.start()

    def update(self, view: memoryview) -> None:
        self.fed += 1
        self.queue.put(view)

    def _run(self) -> None:
        while (view := self.queue.get()) is not None:
            self.sha256.update(view)
            view.release()
            with self.done:
                self.hashed += 1
                self.done.notify_all()

    def wait(self) -> None:
        """Until everything fed so far is hashed."""
        with self.done:
            self.done.wait_for(lambda: self.hashed >= self.fed)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()


def plain_documents(path: Path, piece_bytes: int, *, max_bytes: int, sha256: Any = None) -> Iterator[Doc]:
    """:func:`documents` of a plain (not gzip) file, byte for byte, each piece read straight into
    a buffer that is used again once the piece is scanned: the bytes are copied once (by the
    kernel) and no page is faulted in twice. ``sha256`` is fed the file's bytes as they are read
    (on a thread of its own: :class:`_Hasher`), all of them once this generator is done."""
    hasher = None if sha256 is None else _Hasher(sha256)
    try:
        with open(path, "rb", buffering=0) as f:
            if (size := os.fstat(f.fileno()).st_size) > max_bytes:
                raise over_cap(size, max_bytes, path)
            yield from _plain_pieces(f, piece_bytes, hasher)
    except OSError as err:
        raise IngestError(f"cannot read file ({err.strerror or err})", path=path) from None
    finally:
        if hasher is not None:
            hasher.close()


def _plain_pieces(f: BinaryIO, piece_bytes: int, hasher: _Hasher | None) -> Iterator[Doc]:
    step = min(READ_STEP, piece_bytes)
    pool = _Buffers(piece_bytes + 2 * step + 64)
    buf, filled = pool.get(), 0

    def settled() -> None:
        """What was fed to the hash is hashed: its buffers may be written to and grown."""
        if hasher is not None:
            hasher.wait()

    def read(buf: bytearray, filled: int) -> int:
        """Up to ``step`` more bytes into ``buf`` at ``filled`` (grown when full), hashed."""
        if len(buf) - filled < step:
            settled()
            buf.extend(bytes(step))
        with memoryview(buf) as mv:
            n = f.readinto(mv[filled : filled + step]) or 0
        if n and hasher is not None:
            hasher.update(memoryview(buf)[filled : filled + n])
        return n

    while True:  # the head: up to the events array's opening bracket
        n = read(buf, filled)
        filled += n
        with memoryview(buf) as mv:
            start = _events_start(mv[:filled])
        if start is not None:
            break
        if n == 0:  # short, or no events array: the whole read says what it holds
            yield pool.lend(buf, filled)
            return
        if filled > 2 * piece_bytes:
            raise NotInPieces("no traceEvents array near the head of the file")
    with memoryview(buf) as mv:
        prefix, suffix, level, walker = _wrapping(mv, start)
    start = start[1]
    state = (0, 0, level, level, piece_bytes, 0)  # in_string, escape, depth, level, min_gap, since
    walked, tail_at = start, -1  # buf[:walked] is walked; where the tail after the array begins
    while True:
        if tail_at < 0 and walked < filled:
            with memoryview(buf) as mv:
                found, in_string, escape, depth, since, end = walker.walk(mv[walked:filled], *state)
            state = (in_string, escape, depth, level, piece_bytes, since)
            cuts = [walked + c for c in found]
            tail_at = walked + end if end >= 0 else -1
            walked = filled
            while cuts:  # each cut: the rest goes on in a new buffer behind the prefix
                cut = cuts.pop(0)
                rest = filled - cut
                nxt = pool.get()
                if len(nxt) < len(prefix) + rest + step:
                    nxt.extend(bytes(len(prefix) + rest + step - len(nxt)))
                nxt[: len(prefix)] = prefix
                nxt[len(prefix) : len(prefix) + rest] = memoryview(buf)[cut:filled]
                settled()  # (the buffers lent are hashed whole before they are given back)
                buf[cut - 1 : cut - 1 + len(suffix)] = suffix  # over the comma between the two events
                yield pool.lend(buf, cut - 1 + len(suffix))
                shift = len(prefix) - cut
                cuts = [c + shift for c in cuts]
                tail_at = tail_at + shift if tail_at >= 0 else -1
                buf, filled, walked = nxt, len(prefix) + rest, len(prefix) + rest
        n = read(buf, filled)
        if n == 0:
            break
        filled += n
    if tail_at >= 0 and buf.find(b'"traceEvents"', tail_at, filled) >= 0:
        raise NotInPieces("a second traceEvents key after the events array")
    settled()
    yield pool.lend(buf, filled)


def _wrapping(head: memoryview, found: tuple[bool, int]) -> tuple[bytes, bytes, int, Any]:
    """(prefix, suffix, level, walker) of the pieces of the events array found in ``head``
    (:func:`_events_start`), once the head is walked too: the array must open at the top level,
    outside any string."""
    is_list, start = found
    walker = c_scanner()
    if walker is None:
        raise NotInPieces("the C scanner was switched off")
    level = 1 if is_list else 2
    _, in_string, _, depth, _, _ = walker.walk(head[:start], 0, 0, 0, -1, 0, 0)
    if in_string or depth != level:
        raise NotInPieces("the traceEvents key found is not the top-level one")
    prefix, suffix = (b"[", b"]") if is_list else (b'{"traceEvents":[', b"]}")
    return prefix, suffix, level, walker


def _events_start(head: bytearray | memoryview) -> tuple[bool, int] | None:
    """(top-level list?, offset just past the events array's ``[``) once ``head`` shows it, else
    None (read in place: a plain file's head is its piece buffer). The object form's key is taken
    at its first match; the walk of the first piece and its strict scan check that it is the
    top-level one."""
    first = _LEADING_SPACE.match(head).end()  # type: ignore[union-attr]  # \s* always matches
    if first == len(head):
        return None
    if head[first : first + 1] == b"[":
        return True, first + 1
    m = _EVENTS_KEY.search(head)
    if m is None:
        return None
    return False, m.end()
