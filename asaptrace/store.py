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
complete, so a crash or a bad input file never leaves a half-written store behind.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from asaptrace import __version__
from asaptrace.errors import StoreError, StoreVersionError
from asaptrace.schema import STORE_FORMAT_VERSION, TABLE_SCHEMAS, conform

#: Tables stored as a directory of parts (one per source file); the others are single files.
PARTED_TABLES = ("events", "args", "flows")
SINGLE_TABLES = ("ranks", "streams", "batches")


def write_part(root: Path, table_name: str, part_id: str, table: pa.Table) -> Path:
    """Write one part of a parted table under a (temporary) store root. Safe to call from workers."""
    directory = Path(root) / table_name
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"part-{part_id}.parquet"
    pq.write_table(conform(table, table_name), path, compression="zstd")
    return path


class StoreWriter:
    """Builds a store in a temporary directory; :meth:`commit` renames it into place.

    Use as a context manager: leaving the block by an exception removes the temporary directory.
    """

    def __init__(self, path: str | Path, *, overwrite: bool = False) -> None:
        self.path = Path(path)
        if self.path.exists():
            if not overwrite:
                raise StoreError("already exists; pass --force to replace it", path=self.path)
            if not (self.path / "meta.json").is_file() and any(self.path.iterdir()):
                raise StoreError(
                    "exists and is not an asaptrace store; refusing to replace it", path=self.path
                )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.parent / f".{self.path.name}.tmp-{uuid.uuid4().hex[:8]}"
        self.tmp.mkdir()
        self._overwrite = overwrite
        self._done = False

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self._done:
            self.abort()

    def write_table(self, name: str, table: pa.Table) -> None:
        """Write a single-file table (ranks, streams, batches)."""
        if name not in SINGLE_TABLES:
            raise ValueError(f"{name!r} is a parted table; use write_part")
        pq.write_table(conform(table, name), self.tmp / f"{name}.parquet", compression="zstd")

    def write_part(self, name: str, part_id: str, table: pa.Table) -> Path:
        return write_part(self.tmp, name, part_id, table)

    def commit(self, meta: dict[str, Any]) -> TraceStore:
        """Write meta.json and move the finished store into place."""
        for name in SINGLE_TABLES:
            target = self.tmp / f"{name}.parquet"
            if not target.exists():
                pq.write_table(TABLE_SCHEMAS[name].empty_table(), target)
        full = {"format_version": STORE_FORMAT_VERSION, "asaptrace_version": __version__, **meta}
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
        if not path.is_dir():
            raise StoreError("no such store directory", path=path)
        if not meta_path.is_file():
            raise StoreError("not an asaptrace store (no meta.json)", path=path)
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise StoreError(f"meta.json is unreadable ({err})", path=path) from None
        version = meta.get("format_version")
        if version != STORE_FORMAT_VERSION:
            raise StoreVersionError(
                f"store format version {version!r} is not supported by this asaptrace "
                f"(expects {STORE_FORMAT_VERSION}); re-ingest the traces",
                path=path,
            )
        return cls(path=path, meta=meta)

    def scan(self, name: str) -> pl.LazyFrame:
        """Lazily scan one table; an absent or empty parted table scans as an empty frame."""
        if name in PARTED_TABLES:
            parts = sorted((self.path / name).glob("part-*.parquet"))
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
        return self.scan(name).collect()


def open_store(path: str | Path) -> TraceStore:
    """Open the store at ``path`` (see :meth:`TraceStore.open`)."""
    return TraceStore.open(path)
