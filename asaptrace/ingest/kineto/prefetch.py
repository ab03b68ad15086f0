"""The first trace files, read while ``asaptrace ingest`` is still importing.

Before it reads a byte, ``asaptrace ingest`` imports numpy, pyarrow, polars and the enrichment:
about 0.3 s on one core (0.5 s where pandas is installed: pyarrow imports it too), the other core
idle. :func:`start` reads, hashes, inflates (gzip) and C-scans the first Kineto JSON files on one
thread meanwhile (the read, the hash, zlib and the scan release the GIL), in the order a folder is
walked and within a byte budget; the ingest calls :func:`stop` when it starts reading, and files not begun by
then are read by the ingest as usual.

The Kineto reader takes a file's bytes and scan from here (:func:`take`) and the driver its
sha256 (:func:`digest`), only for the same file: the same resolved path, size and modification
time as when it was read. Nothing here raises: a file that fails here (gone, unreadable, refused
by the strict scanner) is read by the ingest, which reports it as usual. This module imports
only the standard library, so it runs before numpy, pyarrow and polars are imported; the scanner
is an extension with no imports of its own. ``ASAPTRACE_NO_PREFETCH=1`` turns it off.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asaptrace.errors import AsaptraceError
from asaptrace.executors import available_memory
from asaptrace.ingest.kineto import c_scanner
from asaptrace.ingest.source import GZIP_MAGIC, GZIP_RATIO, decompressed, read_whole
from asaptrace.memory import DEFAULT_BUDGET, piecewise_limit, tune_malloc

#: Bytes of files read ahead at most (the window is short: a few files; a quarter of the free
#: memory on a small machine).
BUDGET = 1024**3


@dataclass
class Prefetched:
    """One file read ahead: its bytes, their sha256 and the C scanner's result."""

    path: str  # resolved
    size: int  # on disk
    mtime_ns: int
    max_bytes: int  # the ingest's cap on a file's (decompressed) size
    # (decompressed) content; None: reading it failed (the ingest says why)
    data: bytes | mmap.mmap | None = None
    sha256: str | None = None
    scan: dict[str, Any] | None = None  # ``_kscan.scan``'s result (None with ``refused`` or no data)
    refused: bool = False  # the strict scanner refused it (the reader's msgspec path takes it)
    started: bool = False
    ready: threading.Event = field(default_factory=threading.Event)

    def unchanged(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return st.st_size == self.size and st.st_mtime_ns == self.mtime_ns


class _Prefetcher:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.queue: deque[Prefetched] = deque()
        self.entries: dict[str, Prefetched] = {}

    def start(
        self, paths: Iterable[str | Path], *, max_bytes: int, budget: int | None = None, enrich: bool = False
    ) -> int:
        """Queue the Kineto JSON files (plain or gzip) ``paths`` name, folders walked, and start
        the thread; returns how many files were queued. A file the ingest will read in pieces is
        not read ahead (``enrich``: the ingest enriches, so a lone file over
        :data:`~asaptrace.memory.LONE_FILE_PIECEWISE` is one, :func:`~asaptrace.memory.piecewise_limit`)."""
        if os.environ.get("ASAPTRACE_NO_PREFETCH", "") not in ("", "0"):
            return 0
        if c_scanner() is None:
            return 0
        ingest_budget = DEFAULT_BUDGET if budget is None else budget
        tune_malloc(ingest_budget)  # before the first big buffer (asaptrace.memory)
        free = available_memory()
        left = min(BUDGET if budget is None else budget, free // 4 if free else BUDGET)
        queued: list[Prefetched] = []
        candidates = list(_candidates(paths))
        limit = piecewise_limit(ingest_budget, enriched_files=len(candidates) if enrich else 0)
        for path in candidates:
            try:
                st = path.stat()
                with open(path, "rb") as f:
                    gz = f.read(2) == GZIP_MAGIC
            except OSError:
                continue
            need = st.st_size * (GZIP_RATIO if gz else 1)  # what it holds once inflated
            if need > left or need > limit:
                break  # in walk order: the first that does not fit (or is read in pieces) ends the run ahead
            left -= need
            queued.append(Prefetched(str(path.resolve()), st.st_size, st.st_mtime_ns, max_bytes))
        with self.lock:
            for e in queued:
                if e.path not in self.entries:
                    self.entries[e.path] = e
                    self.queue.append(e)
        if queued:
            threading.Thread(target=self._run, name="asaptrace-prefetch", daemon=True).start()
        return len(queued)

    def _run(self) -> None:
        while True:
            with self.lock:
                if not self.queue:
                    return
                e = self.queue.popleft()
                e.started = True
            try:
                _fill(e)
            finally:
                e.ready.set()

    def stop(self) -> None:
        """Take no new file (the ingest reads the ones not begun)."""
        with self.lock:
            for e in self.queue:
                self.entries.pop(e.path, None)
            self.queue.clear()

    def clear(self) -> None:
        """Stop, and let go of what was read ahead and not taken."""
        self.stop()
        with self.lock:
            self.entries.clear()

    def _entry(self, path: str | Path, *, remove: bool) -> Prefetched | None:
        key = str(Path(path).resolve())
        with self.lock:
            e = self.entries.get(key)
            if e is None:
                return None
            if not e.started:  # not begun: the ingest reads it itself
                self.queue.remove(e)
                del self.entries[key]
                return None
            if remove:
                del self.entries[key]
        e.ready.wait()
        return e if e.data is not None and e.unchanged() else None

    def take(self, path: str | Path) -> Prefetched | None:
        """The file read ahead (waiting for it if it is being read), handed over once; None
        when it was not, or it changed since."""
        return self._entry(path, remove=True)

    def digest(self, path: str | Path) -> str | None:
        """The sha256 of the file read ahead (waiting for it if it is being read), or None."""
        e = self._entry(path, remove=False)
        return e.sha256 if e is not None else None


_SUFFIXES = (".json", ".json.gz")


def _candidates(paths: Iterable[str | Path]) -> Iterable[Path]:
    """The ``.json`` and ``.json.gz`` files ``paths`` name, folders walked as discovery walks them
    (sorted, no hidden files)."""
    for p in map(Path, paths):
        if p.is_dir():
            for q in sorted(p.rglob("*")):
                rel = q.relative_to(p).parts
                if q.name.endswith(_SUFFIXES) and q.is_file() and not any(s.startswith(".") for s in rel):
                    yield q
        elif p.name.endswith(_SUFFIXES) and p.is_file():
            yield p


def _fill(e: Prefetched) -> None:
    try:
        with open(e.path, "rb", buffering=0) as f:
            gz = f.read(2) == GZIP_MAGIC
            f.seek(0)
            raw = f.read() if gz else read_whole(f, e.size)  # plain: in pages of its own
        if len(raw) != e.size:
            return
        e.sha256 = hashlib.sha256(raw).hexdigest()  # of the file as it is on disk
        data = decompressed(raw, Path(e.path), max_bytes=e.max_bytes)
        del raw
        scanner = c_scanner()
        if scanner is None:  # switched off since start() (ASAPTRACE_NO_CSCAN): the ingest reads it
            return
        try:
            e.scan = scanner.scan(data)
        except ValueError:
            e.refused = True
    except (OSError, MemoryError, AsaptraceError):  # the ingest reads it again and says why
        return
    e.data = data


_PREFETCHER = _Prefetcher()
start = _PREFETCHER.start
stop = _PREFETCHER.stop
clear = _PREFETCHER.clear
take = _PREFETCHER.take
digest = _PREFETCHER.digest
