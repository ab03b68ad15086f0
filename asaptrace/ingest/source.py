"""Reading a source file's bytes safely: gzip detected by its magic bytes, decompression capped.

The cap guards against decompression bombs: a small ``.gz`` that inflates to many gigabytes is
refused with :class:`SizeLimitExceeded` before it can exhaust memory.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import mmap
import os
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from asaptrace.errors import CorruptTrace, IngestError, SizeLimitExceeded
from asaptrace.units import human_bytes

GZIP_MAGIC = b"\x1f\x8b"
#: A gzip trace inflates about this much (Kineto JSON: 8–12×): the memory a file's read is
#: guessed to hold (the cap bounds the guess).
GZIP_RATIO = 10
DEFAULT_MAX_DECOMPRESSED = 8 * 1024**3  # 8 GiB
_CHUNK = 16 * 1024 * 1024
HASH_BLOCK = 1024 * 1024


def over_cap(size: int, max_bytes: int, path: Path) -> SizeLimitExceeded:
    said, cap = human_bytes(size), human_bytes(max_bytes)
    over = "just over" if said == cap else f"{said}, over"
    return SizeLimitExceeded(f"file is {over} the cap of {cap} (raise --max-size)", path=path)


def _inflates_over_cap(max_bytes: int, path: Path) -> SizeLimitExceeded:
    return SizeLimitExceeded(
        f"decompresses to more than the cap of {human_bytes(max_bytes)} (raise --max-size)", path=path
    )


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def read_source_bytes(path: str | Path, *, max_bytes: int = DEFAULT_MAX_DECOMPRESSED) -> bytes | mmap.mmap:
    """Return the file's (decompressed) content, refusing more than ``max_bytes`` (a large plain
    file in pages of its own: :func:`read_whole`)."""
    path = Path(path)
    try:
        if not is_gzip(path):
            with open(path, "rb", buffering=0) as f:
                size = os.fstat(f.fileno()).st_size
                if size > max_bytes:
                    raise over_cap(size, max_bytes, path)
                return read_whole(f, size)
        return decompressed(path.read_bytes(), path, max_bytes=max_bytes)
    except OSError as err:
        raise IngestError(f"cannot read file ({err.strerror or err})", path=path) from None


#: A whole read of at least this many bytes gets pages of its own (:func:`read_whole`).
WHOLE_READ_PAGES = 8 * 1024**2


def read_whole(f: BinaryIO, size: int) -> bytes | mmap.mmap:
    """The content of ``f`` (unbuffered, at its start; ``size`` bytes on disk when opened). From
    :data:`WHOLE_READ_PAGES` up, in private anonymous memory the kernel may back with huge pages
    (Linux's transparent huge pages, on ``madvise`` as is common): a fresh 40 MB buffer is then
    ≈ 20 page faults instead of ≈ 10,000 of about 3 µs each on this project's 2-core VM (8 files
    of 40 MB read, hashed and C-scanned: 1.15–1.45 s of CPU against 1.31–1.73 s). The mapping
    acts as ``bytes`` for every reader here (a buffer: slices, ``len``, regex, hashlib, the C
    scanner, msgspec). Plain ``bytes`` for a smaller file, where the system has no such advice,
    or when the file is no longer ``size`` bytes (read again as it is now)."""
    if size < WHOLE_READ_PAGES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return f.read()
    buf = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):  # a kernel without transparent huge pages: small pages, once
        buf.madvise(mmap.MADV_HUGEPAGE)
    got = 0
    with memoryview(buf) as view:
        while got < size and (n := f.readinto(view[got:])):
            got += n
    if got == size and not f.read(1):
        return buf
    buf.close()  # it changed while it was read: as it is now
    f.seek(0)
    return f.read()


def decompressed(raw: bytes, path: Path, *, max_bytes: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """``raw`` (a file's bytes) inflated when it is gzip, refusing more than ``max_bytes``; zlib
    releases the GIL, so this runs beside other threads."""
    if raw[:2] != GZIP_MAGIC:
        if len(raw) > max_bytes:
            raise over_cap(len(raw), max_bytes, path)
        return raw
    chunks: list[bytes] = []
    total = 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb") as f:
            while True:
                chunk = f.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > max_bytes:
                    raise _inflates_over_cap(max_bytes, path)
                chunks.append(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise CorruptTrace(f"corrupt or truncated gzip stream ({err})", path=path) from None
    return b"".join(chunks)


def read_source_chunks(path: Path, *, max_bytes: int, chunk: int, sha256: Any = None) -> Iterator[bytes]:
    """The file's (decompressed) content in chunks of about ``chunk`` bytes, with the checks and
    messages of :func:`read_source_bytes`, never all of it in memory; the bytes on disk feed
    ``sha256`` (a hashlib object) as they are read, so the file need not be read again to hash it."""
    total = 0
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == GZIP_MAGIC
            f.seek(0)
            if not gz and (size := os.fstat(f.fileno()).st_size) > max_bytes:
                raise over_cap(size, max_bytes, path)
            raw: BinaryIO = f if sha256 is None else _Hashed(f, sha256)  # type: ignore[assignment]
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw
            while data := stream.read(chunk):
                total += len(data)
                if total > max_bytes:
                    raise _inflates_over_cap(max_bytes, path)
                yield data
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise CorruptTrace(f"corrupt or truncated gzip stream ({err})", path=path) from None
    except OSError as err:
        raise IngestError(f"cannot read file ({err.strerror or err})", path=path) from None


class _Hashed:
    """A binary file whose reads feed a hash (hashlib lets go of the GIL on large updates)."""

    def __init__(self, f: BinaryIO, sha256: Any) -> None:
        self.f, self.sha256 = f, sha256

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.sha256.update(data)
        return data


def file_sha256(path: str | Path) -> str:
    """The sha256 of the file on disk, read in blocks of 1 MiB into one buffer: a new 8 MiB block
    per read was a new mapping to fault in each time (glibc maps a block of over 128 KiB on its own:
    :mod:`asaptrace.memory`), ≈ 10 k page faults per 40 MB file."""
    h = hashlib.sha256()
    buf = bytearray(HASH_BLOCK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def read_head(path: str | Path, n: int = 65536) -> bytes:
    """Up to the first ``n`` decompressed bytes, for format detection.

    A truncated gzip still yields what precedes the cut (the full read reports the truncation);
    a gzip that yields nothing at all is reported as corrupt here.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(n)
            if raw[:2] != GZIP_MAGIC:
                return raw
            inflater = zlib.decompressobj(wbits=31)
            out = inflater.decompress(raw, n)
            while len(out) < n and not inflater.eof:
                more = f.read(n)
                if not more:
                    break
                out += inflater.decompress(inflater.unconsumed_tail + more, n - len(out))
    except zlib.error as err:
        raise CorruptTrace(f"corrupt gzip stream ({err})", path=path) from None
    except OSError as err:
        raise IngestError(f"cannot read file ({err.strerror or err})", path=path) from None
    if not out:
        raise CorruptTrace("corrupt or truncated gzip stream (nothing decompresses)", path=path)
    return out
