"""What every ingester returns and how formats are registered and detected.

An ingester is a pure per-file function ``read(path, options) -> IngestResult``: picklable, free of
globals, so the driver can map it over files with a process pool. Formats are registered in
:data:`FORMATS` through :func:`register_format` — the built-ins the same way a user extension does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.accounting import Accounting
from asaptrace.chunks import HostChunks
from asaptrace.errors import UnsupportedFormat
from asaptrace.ingest.naming import NameHint, rank_from_name
from asaptrace.ingest.source import DEFAULT_MAX_DECOMPRESSED, read_head
from asaptrace.memory import DEFAULT_BUDGET
from asaptrace.registry import Registry


@dataclass(frozen=True)
class IngestOptions:
    """Knobs shared by all ingesters."""

    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED
    #: a file (decompressed) larger than this is never held whole: the largest file whose whole
    #: read keeps the ingest's memory budget, at most 128 MiB for a lone file to enrich (the
    #: driver sets it, :func:`~asaptrace.memory.piecewise_limit`)
    piecewise_from: int = DEFAULT_BUDGET
    #: where a reader may write a big file's plain host rows and flows in chunks instead of holding them
    #: (:mod:`asaptrace.chunks`); set by the driver for an ingest that enriches, else None
    chunk_dir: str | None = None


@dataclass(frozen=True)
class RankInfo:
    """What a file says (or its name says) about which device it is."""

    rank: int | None = None
    source: str = "unknown"  # distributedInfo | filename:<rule> | order | map | …
    world_size: int | None = None
    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    host: str | None = None
    device: int | None = None


@dataclass
class IngestResult:
    """One source file, read: canonical tables (rank column still -1) plus what we learned."""

    path: str
    format: str
    events: pa.Table
    args: pa.Table
    flows: pa.Table
    streams: pa.Table
    accounting: Accounting
    rank_info: RankInfo = field(default_factory=RankInfo)
    notes: dict[str, Any] = field(default_factory=dict)  # format-specific facts kept in meta.json
    sha256: str | None = None  # of the file on disk, when the reader hashed it as it read it
    host_chunks: HostChunks | None = None  # rows written in chunks, kept out of ``events``/``args``/``flows``

    def with_rank(self, rank: int) -> IngestResult:
        """Fill the rank column of every table."""

        def fill(t: pa.Table) -> pa.Table:
            i = t.schema.get_field_index("rank")
            return t.set_column(i, "rank", pa.array(np.full(t.num_rows, rank, np.int32)))

        return replace(
            self,
            events=fill(self.events),
            args=fill(self.args),
            flows=fill(self.flows),
            streams=fill(self.streams),
            rank_info=replace(self.rank_info, rank=rank),
            host_chunks=None if self.host_chunks is None else self.host_chunks.with_rank(rank),
        )


@dataclass(frozen=True)
class Format:
    """A registered source format: everything the driver needs to know about it.

    ``priority``: formats are asked, highest first, whether a file is theirs (a format whose files
    also look like another's — an Ascend ``trace_view.json`` is Chrome-trace JSON — goes first).
    ``group``: folds the discovered files into one path per source (an Ascend rank folder's many
    files into its timeline); files it does not claim pass through. ``source_name``: what a rank
    map calls a source (None: not mine, the file name is used). ``rank_hint``: the rank and
    parallel indices a path's name says. ``suffixes`` / ``file_names``: what a file inside a folder
    must be called to be taken as a trace of this format (a file named explicitly is always taken).
    ``hashes_while_reading``: whether the reader hashes this file (read with these options) as it
    reads it (its result's ``sha256``), so the driver does not read it a second time to hash it.
    ``reads_in_chunks``: whether, given a ``chunk_dir``, the reader writes the file's plain host
    rows and flows there in chunks (:mod:`asaptrace.chunks`) instead of into its tables.
    """

    name: str
    sniff: Callable[[Path, bytes], bool]  # (path, first decompressed bytes) -> is it mine?
    read: Callable[[Path, IngestOptions], IngestResult]
    description: str = ""
    priority: int = 0
    group: Callable[[list[Path]], list[Path]] | None = None
    source_name: Callable[[Path], str | None] | None = None
    rank_hint: Callable[[Path], NameHint | None] = rank_from_name
    suffixes: tuple[str, ...] = ()
    file_names: tuple[str, ...] = ()
    hashes_while_reading: Callable[[Path, IngestOptions], bool] | None = None
    #: whether the reader writes this file's plain host rows and flows in chunks (given a ``chunk_dir``)
    reads_in_chunks: Callable[[Path, IngestOptions], bool] | None = None


#: The ingest formats; the built-in ones register themselves when their reader is imported,
#: which the first lookup does.
FORMATS: Registry[Format] = Registry(
    "ingest format",
    builtins=(
        "asaptrace.ingest.ascend.reader",
        "asaptrace.ingest.kineto.reader",
        "asaptrace.ingest.nsys.reader",
    ),
)


def register_format(fmt: Format) -> Format:
    return FORMATS.register(fmt.name, fmt)


def by_priority() -> list[Format]:
    """Registered formats, highest priority first (registration order among equals)."""
    return sorted((fmt for _, fmt in FORMATS), key=lambda f: -f.priority)


def group_sources(files: list[Path]) -> list[Path]:
    """One path per source: each format folds the files it groups (see :class:`Format`)."""
    for fmt in by_priority():
        if fmt.group is not None:
            files = fmt.group(files)
    return files


def looks_like_trace(name: str) -> bool:
    """Whether a file called ``name`` inside a folder is some registered format's trace."""
    return any(name.endswith(f.suffixes) or name in f.file_names for _, f in FORMATS)


def source_name(path: Path) -> str:
    """What a rank map calls the source at ``path``: a format's name for it, else the file name."""
    for fmt in by_priority():
        if fmt.source_name is not None and (name := fmt.source_name(path)) is not None:
            return name
    return path.name


def detect_format(path: str | Path) -> Format:
    """The first format (by priority) whose sniffer accepts the file, or :class:`UnsupportedFormat`."""
    path = Path(path)
    head = read_head(path)
    if not head.strip():
        raise UnsupportedFormat("file is empty or unreadable", path=path)
    for fmt in by_priority():
        if fmt.sniff(path, head):
            return fmt
    known = ", ".join(FORMATS.names())
    raise UnsupportedFormat(f"not a recognised profiler trace (known formats: {known})", path=path)


def dictionary(values: pa.Array) -> pa.Array:
    """Dictionary-encode a string array with int32 indices (the store's convention)."""
    arr = values.dictionary_encode() if not pa.types.is_dictionary(values.type) else values
    return pc.cast(arr, pa.dictionary(pa.int32(), pa.string()))
