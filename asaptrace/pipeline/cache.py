"""A store's diagnosis kept beside its tables, so every look after the first is a read.

Diagnosing a 384-rank run takes seconds (5 s on two cores); ``analyze``, ``advise``, ``report``
and the dashboard's first page would each pay them again. :func:`asaptrace.pipeline.diagnose_store`
(without options: the store's own enrichment) writes what it made to ``<store>/.diagnosis.zip``
— the Diagnosis's tables as Arrow IPC, its findings, notes and meta as JSON — and reads it back the
next time, when it was made under the same key — and with it what :func:`asaptrace.info.store_info`
says of the store (half a second more of scanning every event at 384 ranks), for ``info`` and the
dashboard (:func:`read_cached_info`):

* the bytes of ``meta.json`` (the format version, every source's sha256, every file's row count),
* the size and modification time of every Parquet file of the store (a file replaced in place),
* the asaptrace version and a hash of its code (every ``asaptrace/**/*.py``: an upgrade, or an edit
  in a working copy, never reads a diagnosis an older code made).

A cache under another key is ignored and replaced, so it can never be stale. It is not one of the
store's files: :meth:`asaptrace.store.TraceStore.open` checks only the Parquet files meta.json lists,
the store's format and fingerprint do not see it, and a store rewritten in place (a new directory
renamed over the old) leaves it behind with the old directory. It is written to a temporary sibling
renamed into place, so two processes writing at once leave one whole file; a store that cannot be
written (a read-only folder) is simply diagnosed each time, and an unreadable cache is diagnosed
again and rewritten. No pickle: a store handed over by someone else cannot run code on load.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import uuid
import zipfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

if TYPE_CHECKING:
    from asaptrace.analyze.diagnosis import Diagnosis
    from asaptrace.store import TraceStore

T = TypeVar("T")

#: The file beside the store's tables (hidden: ``ls`` of a store shows only what the store is).
CACHE_NAME = ".diagnosis.zip"
#: The layout of the cache file itself (bumped if it changes; part of the key).
CACHE_LAYOUT = 1


@cache
def code_hash() -> str:
    """A hash of asaptrace's version and every one of its Python files (once per process: ≈ 200
    files, a few milliseconds)."""
    from asaptrace import __version__

    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(f"{__version__}\0{CACHE_LAYOUT}".encode())
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(p.read_bytes())
    return h.hexdigest()


def store_key(store: TraceStore) -> str | None:
    """The key a cached diagnosis of ``store`` must carry (None when the store cannot be keyed:
    its meta.json or a file gone)."""
    try:
        h = hashlib.sha256((store.path / "meta.json").read_bytes())
        for rel in sorted(store.meta.get("files") or {}):
            st = (store.path / rel).stat()
            h.update(f"\0{rel}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    except OSError:
        return None
    return f"{h.hexdigest()}-{code_hash()}"


#: What a damaged or foreign cache file raises on the way in (it is then made again).
_UNREADABLE = (OSError, KeyError, ValueError, zipfile.BadZipFile, pl.exceptions.PolarsError)


def _open_current(store: TraceStore) -> zipfile.ZipFile | None:
    """The cache file of ``store``, open, when it carries this store's and this code's key."""
    key, path = store_key(store), store.path / CACHE_NAME
    if key is None or not path.is_file():
        return None
    z = zipfile.ZipFile(path)
    try:
        if z.read("key").decode() == key:
            return z
    except _UNREADABLE:
        pass
    z.close()
    return None


def _read_current(store: TraceStore, read: Callable[[zipfile.ZipFile], T]) -> T | None:
    """``read`` of the cache file of ``store`` when it is current, else None (a damaged or foreign
    one too: it is made again)."""
    try:
        z = _open_current(store)
        if z is None:
            return None
        with z:
            return read(z)
    except _UNREADABLE:
        return None


def read_cached_info(store: TraceStore) -> dict[str, Any] | None:
    """What :func:`asaptrace.info.store_info` said of ``store`` when it was diagnosed, if still true."""
    info = _read_current(store, lambda z: json.loads(z.read("info.json")))
    return None if info is None else {**info, "store": str(store.path)}  # it may have moved since


def read_cached(store: TraceStore) -> Diagnosis | None:
    """The cached diagnosis of ``store`` when its key is this store's and this code's, else None."""
    from asaptrace.analyze.diagnosis import Diagnosis, Finding

    def read(z: zipfile.ZipFile) -> tuple[dict[str, Any], dict[str, pl.DataFrame]]:
        head = json.loads(z.read("diagnosis.json"))
        return head, {
            name: pl.read_ipc(io.BytesIO(z.read(f"tables/{name}.arrow"))) for name in head["tables"]
        }

    got = _read_current(store, read)
    if got is None:
        return None
    head, tables = got
    findings = [Finding(**f) for f in head["findings"]]
    meta = {**head["meta"], "store": str(store.path)}  # the store may have moved since
    return Diagnosis(tables=tables, findings=findings, notes=head["notes"], meta=meta)


def write_cached(store: TraceStore, diag: Diagnosis, info: dict[str, Any]) -> bool:
    """Keep ``diag`` and ``info`` (:func:`asaptrace.info.store_info`) beside ``store``
    (atomically); False when the store cannot be written (read-only) or either does not survive
    JSON whole (then nothing is kept: a cache must give back what was made)."""
    key = store_key(store)
    if key is None:
        return False
    head = {
        "tables": list(diag.tables),
        "findings": [f.to_json() for f in diag.findings],
        "notes": diag.notes,
        "meta": {k: v for k, v in diag.meta.items() if k != "store"},
    }
    try:
        text, info_text = json.dumps(head), json.dumps(info)
    except (TypeError, ValueError):
        return False
    if json.loads(text) != head or json.loads(info_text) != info:
        return False  # a tuple or a non-string key would come back otherwise
    tmp = store.path / f"{CACHE_NAME}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr("key", key)
            z.writestr("info.json", info_text)
            z.writestr("diagnosis.json", text)
            for name, df in diag.tables.items():
                buf = io.BytesIO()
                df.write_ipc(buf, compression="lz4")
                z.writestr(f"tables/{name}.arrow", buf.getvalue())
        os.replace(tmp, store.path / CACHE_NAME)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True
