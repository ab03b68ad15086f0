"""Reading a source file's bytes safely: gzip detected by its magic bytes, decompression capped.

The cap guards against decompression bombs: a small ``.gz`` that inflates to many gigabytes is
refused with :class:`SizeLimitExceeded` before it can exhaust memory.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

from asaptrace.errors import CorruptTrace, IngestError, SizeLimitExceeded

GZIP_MAGIC = b"\x1f\x8b"
#: A gzip trace inflates about this much (Kineto JSON: 8–12×): the memory a file's read is
#: guessed to hold (the cap bounds the guess).
GZIP_RATIO = 10
DEFAULT_MAX_DECOMPRESSED = 8 * 1024**3  # 8 GiB
_CHUNK = 16 * 1024 * 1024


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def read_source_bytes(path: str | Path, *, max_bytes: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """Return the file's (decompressed) content, refusing more than ``max_bytes``."""
    path = Path(path)
    try:
        if not is_gzip(path):
            size = path.stat().st_size
            if size > max_bytes:
                raise SizeLimitExceeded(
                    f"file is {size} bytes, over the cap of {max_bytes} bytes (raise --max-size)", path=path
                )
            return path.read_bytes()
        return decompressed(path.read_bytes(), path, max_bytes=max_bytes)
    except OSError as err:
        raise IngestError(f"cannot read file ({err.strerror or err})", path=path) from None


def decompressed(raw: bytes, path: Path, *, max_bytes: int = DEFAULT_MAX_DECOMPRESSED) -> bytes:
    """``raw`` (a file's bytes) inflated when it is gzip, refusing more than ``max_bytes``; zlib
    releases the GIL, so this runs beside other threads."""
    if raw[:2] != GZIP_MAGIC:
        if len(raw) > max_bytes:
            raise SizeLimitExceeded(
                f"file is {len(raw)} bytes, over the cap of {max_bytes} bytes (raise --max-size)", path=path
            )
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
                    raise SizeLimitExceeded(
                        f"decompresses to more than the cap of {max_bytes} bytes (raise --max-size)",
                        path=path,
                    )
                chunks.append(chunk)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise CorruptTrace(f"corrupt or truncated gzip stream ({err})", path=path) from None
    return b"".join(chunks)


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
