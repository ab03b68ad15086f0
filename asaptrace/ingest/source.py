"""Reading a source file's bytes safely: gzip detected by its magic bytes, decompression capped.

The cap guards against decompression bombs: a small ``.gz`` that inflates to many gigabytes is
refused with :class:`SizeLimitExceeded` before it can exhaust memory.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from asaptrace.errors import CorruptTrace, IngestError, SizeLimitExceeded

GZIP_MAGIC = b"\x1f\x8b"
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
        chunks: list[bytes] = []
        total = 0
        with gzip.open(path, "rb") as f:
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
        return b"".join(chunks)
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise CorruptTrace(f"corrupt or truncated gzip stream ({err})", path=path) from None
    except OSError as err:
        raise IngestError(f"cannot read file ({err.strerror or err})", path=path) from None


def read_head(path: str | Path, n: int = 65536) -> bytes:
    """The first ``n`` decompressed bytes, for format detection (empty if unreadable)."""
    path = Path(path)
    try:
        if is_gzip(path):
            with gzip.open(path, "rb") as f:
                return f.read(n)
        with open(path, "rb") as f:
            return f.read(n)
    except (OSError, EOFError, zlib.error):
        return b""
