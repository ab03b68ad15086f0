"""TraceStore: the Parquet directory every analysis reads, written atomically.

Layout of a store directory::

    meta.json              format version, sources (size, sha256), accounting, parallel config
    ranks.parquet          one row per rank
    streams.parquet        one row per (rank, pid, stream) timeline
    batches.parquet        batch composition (optional)
    events/part-*.parquet  canonical events, one part per rank (raw: per source file), scanned lazily together
    args/part-*.parquet    useful event arguments (parted like events)
    flows/part-*.parquet   flow events (parted like events)

A store is written into a hidden temporary sibling directory and renamed into place only when
complete, so a crash or a bad input file never leaves a half-written store behind. A write that
fails (a full disk) is one :class:`OutputError` naming the store; the temporary directory is
removed. One that a ``kill -9`` left is removed by the next writer to the same store (its name
records the host and pid: :func:`asaptrace.userfiles.remove_stale_siblings`).

meta.json lists every Parquet file of the store with its row count (``files``). Opening a store
reads each file's footer and checks it against that list, so a deleted, truncated, replaced or
foreign file is one :class:`StoreError` naming that file, not a polars error deep in an analysis.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from polars.exceptions import PolarsError

from asaptrace import __version__
from asaptrace.errors import OutputError, StoreError, StoreVersionError
from asaptrace.schema import STORE_FORMAT_VERSION, TABLE_SCHEMAS, conform
from asaptrace.userfiles import (
    StaleFolder,
    check_output_dir,
    make_tmp_sibling,
    remove_stale_siblings,
    write_error,
)

#: Tables stored as a directory of parts (one per source file); the others are single files.
PARTED_TABLES = ("events", "args", "flows")
SINGLE_TABLES = ("ranks", "streams", "batches")
_STAGE = ".staged"  # StoreWriter's replacement parts, inside its temporary directory


#: The suffix of a *scratch* part: a raw part written only for the ingest's enrichment to read
#: back before the commit, as Arrow IPC (no encoding on the way out nor decoding on the way in:
#: a fifth of a Parquet part's cost). The enrichment replaces every one; a store has none.
SCRATCH_SUFFIX = ".arrow"


def write_part(root: Path, table_name: str, part_id: str, table: pa.Table, *, scratch: bool = False) -> Path:
    """Write one part of a parted table under a (temporary) store root (a :data:`SCRATCH_SUFFIX`
    file when ``scratch``). Safe to call from workers."""
    directory = Path(root) / table_name
    directory.mkdir(parents=True, exist_ok=True)
    table = conform(table, table_name)
    if scratch:
        path = directory / f"part-{part_id}{SCRATCH_SUFFIX}"
        write_arrow(table, path)
        return path
    path = directory / f"part-{part_id}.parquet"
    write_parquet(table, path)
    return path


def write_arrow(table: pa.Table, path: Path) -> None:
    """Write ``table`` as an Arrow IPC file: the ingest's scratch, written and read back once (no
    encoding either way)."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
        out.write_table(table)


#: Integer columns that grow along a rank's events (times, ids): stored as deltas.
_DELTA_COLUMNS = frozenset({"ts_ns", "eid", "corr", "external_id"})

#: String columns of nearly unique values, stored plain: a flow's id is shared by its two or
#: three events only, so its dictionary overflowed and fell back to plain pages, paying for both
#: (2 GB rank's flows: 0.33 → 0.24 s to write, 11.3 → 5.2 MB).
_UNIQUE_STRINGS = frozenset({"flow_id"})


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write one of the store's Parquet files: zstd; dictionary pages for strings only, but for
    near-unique ones (a dictionary of nanosecond times or ids overflows and falls back to plain
    pages, paying for both), deltas for the growing integer columns, statistics for the non-string columns (what
    a filter on rank, time or step skips by). Against zstd with the defaults, on 8 ranks of a
    40 MB trace: parts a third the size, written in 0.57× the time (benchmarks/ingest_folder.py)."""
    pq.write_table(table, path, **_parquet_options(table.schema))


def parquet_writer(path: Path, schema: pa.Schema) -> pq.ParquetWriter:
    """A writer of one of the store's Parquet files a row group at a time, with
    :func:`write_parquet`'s settings (a part too large to hold whole)."""
    return pq.ParquetWriter(path, schema, **_parquet_options(schema))


def _parquet_options(schema: pa.Schema) -> dict[str, Any]:
    strings = [f.name for f in schema if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)]
    return {
        "compression": "zstd",
        "use_dictionary": [name for name in strings if name not in _UNIQUE_STRINGS],
        "write_statistics": [f.name for f in schema if f.name not in strings],
        "column_encoding": {
            f.name: "DELTA_BINARY_PACKED"
            for f in schema
            if f.name in _DELTA_COLUMNS and pa.types.is_integer(f.type)
        },
    }


def event_names(table: pa.Table) -> list[str]:
    """The distinct names a raw events part uses (its dictionary's codes in use, not all entries)."""
    name = table.column("name").combine_chunks()
    if not isinstance(name, pa.DictionaryArray):
        return pc.unique(name).drop_null().to_pylist()
    return name.dictionary.take(pc.unique(name.indices).drop_null()).to_pylist()


def scan_parts(paths: list[Path], **options: Any) -> pl.LazyFrame:
    """One lazy scan of parts in the given order, Parquet or scratch (``options`` go to both)."""
    scratch = [p.suffix == SCRATCH_SUFFIX for p in paths]
    if not any(scratch):
        return pl.scan_parquet(paths, **options)
    if all(scratch):
        return pl.scan_ipc(paths, **options)
    return pl.concat(
        [(pl.scan_ipc if s else pl.scan_parquet)(p, **options) for p, s in zip(paths, scratch, strict=True)]
    )


def check_store_target(path: str | Path, *, overwrite: bool = False) -> Path:
    """Check, before any work, that a store can be written at ``path``: a folder can be created
    there, and what is there already is an asaptrace store replaced only with ``overwrite``."""
    path = check_output_dir(path, replace=overwrite)
    if path.exists():
        if not overwrite:
            raise StoreError("already exists; pass --force to replace it", path=path)
        if not (path / "meta.json").is_file() and any(path.iterdir()):
            raise StoreError("exists and is not an asaptrace store; refusing to replace it", path=path)
    return path


class StoreWriter:
    """Builds a store in a temporary directory; :meth:`commit` renames it into place.

    Use as a context manager: leaving the block by an exception removes the temporary directory,
    and an ``OSError`` (a full disk, from Python or pyarrow, in this thread or a worker's) leaves
    it as one :class:`OutputError` naming the store. Temporary directories of earlier writers to
    the same store whose process is gone are removed first (``stale``; ``on_stale`` is told each).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        overwrite: bool = False,
        on_stale: Callable[[StaleFolder], None] | None = None,
    ) -> None:
        self.path = check_store_target(path, overwrite=overwrite)
        self.stale = remove_stale_siblings(self.path)
        for folder in self.stale:
            if on_stale is not None:
                on_stale(folder)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = make_tmp_sibling(self.path)
        except OSError as err:
            raise OutputError(f"cannot create the store ({write_error(err)})", path=self.path) from None
        self._overwrite = overwrite
        self._done = False
        self.held: dict[str, dict[str, pa.Table]] = {}  # table → part id → raw part kept in memory
        #: rank → its host rows the reader wrote in chunks (asaptrace.chunks.HostChunks)
        self.host_chunks: dict[int, Any] = {}

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._done:
            self.abort()
        if isinstance(exc, OSError):
            raise OutputError(
                f"cannot write the store ({write_error(exc)}); nothing was written", path=self.path
            ) from None

    def write_table(self, name: str, table: pa.Table) -> None:
        """Write a single-file table (ranks, streams, batches)."""
        if name not in SINGLE_TABLES:
            raise ValueError(f"{name!r} is a parted table; use write_part")
        write_parquet(conform(table, name), self.tmp / f"{name}.parquet")

    def write_part(self, name: str, part_id: str, table: pa.Table) -> Path:
        return write_part(self.tmp, name, part_id, table)

    def hold_part(self, name: str, part_id: str, table: pa.Table) -> None:
        """Keep a raw part of parted table ``name`` in memory instead of writing it (the ingest's
        enrichment reads it from :attr:`held`, then writes the enriched parts): a raw part that
        is rewritten anyway costs an encode, a write and a read for nothing."""
        self.held.setdefault(name, {})[part_id] = table

    def write_staged_part(self, name: str, part_id: str, table: pa.Table) -> Path:
        """Write a part of the *replacement* of parted table ``name``: staged out of sight of scans
        of the parts already written (an enrichment reads the raw parts while it writes the
        enriched ones), until :meth:`promote_staged` puts the staged parts in their place."""
        return write_part(self.tmp / _STAGE, name, part_id, table)

    def staged_writer(self, name: str, part_id: str) -> pq.ParquetWriter:
        """:meth:`write_staged_part`'s file, written a row group at a time (:func:`parquet_writer`):
        the caller writes tables of the table's schema and closes it."""
        directory = self.tmp / _STAGE / name
        directory.mkdir(parents=True, exist_ok=True)
        return parquet_writer(directory / f"part-{part_id}.parquet", TABLE_SCHEMAS[name])

    def promote_staged(self) -> None:
        """Replace every parted table by its staged parts (a table with none staged is emptied);
        held raw parts are dropped with the written ones."""
        self.held.clear()
        stage = self.tmp / _STAGE
        for name in PARTED_TABLES:
            shutil.rmtree(self.tmp / name, ignore_errors=True)
            if (stage / name).is_dir():
                (stage / name).rename(self.tmp / name)
        shutil.rmtree(stage, ignore_errors=True)

    def commit(self, meta: dict[str, Any]) -> TraceStore:
        """Write meta.json and move the finished store into place (held parts not replaced by
        :meth:`promote_staged` are written first)."""
        for name, parts in self.held.items():
            for part_id, table in parts.items():
                write_part(self.tmp, name, part_id, table)
        self.held.clear()
        for name in SINGLE_TABLES:
            target = self.tmp / f"{name}.parquet"
            if not target.exists():
                write_parquet(TABLE_SCHEMAS[name].empty_table(), target)
        meta = {k: v for k, v in meta.items() if k != "files"}
        full = {
            "format_version": STORE_FORMAT_VERSION,
            "asaptrace_version": __version__,
            **meta,
            "files": _file_rows(self.tmp),
        }
        (self.tmp / "meta.json").write_text(json.dumps(full, indent=2, sort_keys=False))
        backup = None
        if self.path.exists():
            backup = self.path.parent / f".{self.path.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(self.path, backup)
        os.replace(self.tmp, self.path)
        if backup is not None:
            shutil.rmtree(backup, ignore_errors=True)
        self._done = True
        return TraceStore.open(self.path)

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._done = True


@dataclass(frozen=True)
class TraceStore:
    """A read-only handle on a store directory; tables come back as polars LazyFrames."""

    path: Path
    meta: dict[str, Any]

    @classmethod
    def open(cls, path: str | Path) -> TraceStore:
        path = Path(path)
        meta_path = path / "meta.json"
        import shlex

        ingest = shlex.join(
            ["asaptrace", "ingest", str(path), "-o", f"{path.name.split('.')[0] or 'run'}.store"]
        )
        if path.is_file():
            raise StoreError(f"is a file, not a store; read it into one first: `{ingest}`", path=path)
        if not path.is_dir():
            raise StoreError("no such store directory", path=path)
        if not meta_path.is_file():
            if (path / "events").is_dir() or (path / "ranks.parquet").exists():
                raise StoreError("missing: the store is damaged; re-ingest the traces", path=meta_path)
            raise StoreError(
                f"not an asaptrace store (no meta.json); to read traces in it: `{ingest}`", path=path
            )
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise StoreError(f"meta.json is unreadable ({err})", path=path) from None
        if not isinstance(meta, dict):
            raise StoreError("meta.json is unreadable (not a JSON object)", path=path)
        version = meta.get("format_version")
        if version != STORE_FORMAT_VERSION:
            raise StoreVersionError(version_message(meta, path), path=path)
        _check_files(path, meta.get("files"))
        return cls(path=path, meta=meta)

    def parts(self, name: str) -> list[Path]:
        """The Parquet parts of parted table ``name``, in scan order."""
        listed = self.meta.get("files")
        if isinstance(listed, dict):  # exactly the parts written, so a lost one is an error
            return [self.path / rel for rel in listed if rel.startswith(f"{name}/")]
        found = [
            *(self.path / name).glob("part-*.parquet"),
            *(self.path / name).glob(f"part-*{SCRATCH_SUFFIX}"),
        ]
        return sorted(found, key=lambda p: p.stem)

    def scan(self, name: str) -> pl.LazyFrame:
        """Lazily scan one table; an absent or empty parted table scans as an empty frame."""
        if name in PARTED_TABLES:
            parts = self.parts(name)
            if not parts:
                return pl.from_arrow(TABLE_SCHEMAS[name].empty_table()).lazy()  # type: ignore[union-attr]
            return pl.scan_parquet(parts)
        if name in SINGLE_TABLES:
            return pl.scan_parquet(self.path / f"{name}.parquet")
        raise StoreError(f"unknown table {name!r}", path=self.path)

    def events(self) -> pl.LazyFrame:
        return self.scan("events")

    def ranks(self) -> pl.LazyFrame:
        return self.scan("ranks")

    def read(self, name: str) -> pl.DataFrame:
        try:
            return self.scan(name).collect()
        except (PolarsError, OSError) as err:
            where = self.path / (name if name in PARTED_TABLES else f"{name}.parquet")
            raise StoreError(f"cannot be read, the store is damaged ({_one_line(err)})", path=where) from None


def version_message(meta: dict[str, Any], path: Path) -> str:
    """Why a store of another format version is refused, in one line: both versions and how to
    rebuild it (:func:`rebuild_command`)."""
    version, by = meta.get("format_version"), meta.get("asaptrace_version")
    said = f"store format v{version}" if isinstance(version, int) else f"store format {version!r}"
    written = f"written by asaptrace {by} in {said}" if by else f"written in {said}"
    newer = isinstance(version, int) and version > STORE_FORMAT_VERSION
    return (
        f"{written}; this asaptrace ({__version__}) reads v{STORE_FORMAT_VERSION}"
        + (" (upgrade asaptrace, or" if newer else "; rebuild it")
        + f" with `{rebuild_command(meta, path)}`"
        + (")" if newer else "")
    )


def rebuild_command(meta: dict[str, Any], path: Path) -> str:
    """The command that rebuilds the store at ``path`` from its sources: the paths and options its
    ingest recorded (``meta["ingest"]``), else the folder its sources share (a store written before
    v2); a replayed store: the replay of the store it was replayed from."""
    import shlex

    replay = meta.get("replay")
    if isinstance(replay, dict) and replay.get("of"):
        words = ["asaptrace", "replay", str(replay["of"]), "--policy", str(replay.get("policy", "…"))]
        return shlex.join([*words, "-o", str(path), "--force"])
    said = meta.get("ingest") if isinstance(meta.get("ingest"), dict) else {}
    inputs = [str(p) for p in said.get("inputs") or []]
    if not inputs:
        sources = [
            str(s.get("path")) for s in meta.get("sources") or [] if isinstance(s, dict) and s.get("path")
        ]
        inputs = (
            [os.path.commonpath([os.path.dirname(s) for s in sources])] if len(sources) > 1 else sources
        ) or ["TRACES"]
    options = [
        w for k in ("parallel", "batches", "taxonomy") if said.get(k) for w in (f"--{k}", str(said[k]))
    ]
    return shlex.join(["asaptrace", "ingest", *inputs, "-o", str(path), "--force", *options])


def open_store(path: str | Path) -> TraceStore:
    """Open the store at ``path`` (see :meth:`TraceStore.open`)."""
    return TraceStore.open(path)


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text if len(text) <= 200 else text[:197] + "..."


def _store_files(root: Path) -> list[str]:
    """The Parquet files of a store, relative to its root (single tables, then parts)."""
    files = [f"{name}.parquet" for name in SINGLE_TABLES if (root / f"{name}.parquet").exists()]
    for name in PARTED_TABLES:
        files += [f"{name}/{p.name}" for p in sorted((root / name).glob("part-*.parquet"))]
    return files


def _file_rows(root: Path) -> dict[str, int]:
    return {rel: pq.read_metadata(root / rel).num_rows for rel in _store_files(root)}


def _check_files(root: Path, listed: Any) -> None:
    """Raise a StoreError naming the first missing, damaged or unexpected file of the store.

    ``listed`` is meta.json's ``files`` (relative path → rows); stores written before it existed
    have none, and then only the footers and columns of the files present are checked.
    """
    damaged = "the store is damaged; re-ingest the traces"
    for name in SINGLE_TABLES:
        if not (root / f"{name}.parquet").is_file():
            raise StoreError(f"missing: {damaged}", path=root / f"{name}.parquet")
    if listed is not None and not (
        isinstance(listed, dict) and all(isinstance(v, int) for v in listed.values())
    ):
        raise StoreError("meta.json: 'files' is not a map of file → rows", path=root)
    present = _store_files(root)
    if isinstance(listed, dict):
        for rel in listed:
            if rel not in present:
                raise StoreError(f"missing ({listed[rel]:,} rows): {damaged}", path=root / rel)
        for rel in present:
            if rel not in listed:
                raise StoreError(
                    f"not written with this store (not in meta.json): {damaged}", path=root / rel
                )
    for rel in present:
        try:
            md = pq.read_metadata(root / rel)
            names = set(md.schema.to_arrow_schema().names)
        except (OSError, pa.ArrowException) as err:
            raise StoreError(
                f"truncated or not Parquet ({_one_line(err)}): {damaged}", path=root / rel
            ) from None
        table = rel.split("/")[0].removesuffix(".parquet")
        lacking = [n for n in TABLE_SCHEMAS[table].names if n not in names]
        if lacking:
            raise StoreError(f"lacks the columns {lacking}: {damaged}", path=root / rel)
        if isinstance(listed, dict) and md.num_rows != listed[rel]:
            raise StoreError(
                f"holds {md.num_rows:,} rows, meta.json says {listed[rel]:,}: {damaged}", path=root / rel
            )
