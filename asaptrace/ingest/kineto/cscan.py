"""The C fast path of the Kineto reader: ``_kscan.scan`` buffers → :class:`EventColumns`.

The scanner (``_kscan.c``) reads the JSON once and returns plain buffers (read-only memoryviews of
its own memory, never copied): per-event codes, values
and statuses, string dictionaries, and the raw text of the few values and args Python must decode
itself. This module wraps them with numpy/Arrow (no Python object per event) and applies the same
per-value rules as the msgspec path to the "odd" values the scanner did not convert.

:func:`decode_c` returns None when the file should go through the msgspec path instead: the
strict scanner refused it (msgspec then gives the error message, or reads what it accepts), or it
holds integer literals too long for the scanner to hand over safely.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.errors import CorruptTrace
from asaptrace.ingest import columns as col
from asaptrace.ingest.kineto.decode import (
    ARGS_LIST_DECODER,
    EMPTY_ARGS,
    NO_EVENTS_LIST,
    EventArgs,
    EventColumns,
    IdColumn,
    Times,
    decode_value,
)

try:
    from asaptrace.ingest.kineto import _kscan
except ImportError:  # not built (no compiler at install time): the msgspec path reads every file
    _kscan = None

# value fields, in the scanner's order (the "odd" table names them by index)
_PID, _TID, _ID, _TS, _DUR, _CORR, _EXT = range(7)
_FIELDS = ("pid", "tid", "id", "ts", "dur", "corr", "ext")
_OK, _ODD, _STR = 1, 2, 3


def available() -> bool:
    """Whether the C scanner was built."""
    return _kscan is not None


def decode_c(data: bytes, path: Path, res: dict[str, Any] | None = None) -> EventColumns | None:
    """Scan ``data`` into columns (``res``: its scan, when made already), or None when the
    msgspec path must read this file."""
    if _kscan is None:
        return None
    if res is None:
        try:
            res = _kscan.scan(data)
        except ValueError:
            return None
    if res["huge_ints"]:
        return None
    if not res["has_events"]:
        raise CorruptTrace(NO_EVENTS_LIST, path=path)
    return _Scanned(res, memoryview(data)).columns()


def _strings(data: bytes | memoryview, offsets: bytes | memoryview) -> list[str]:
    offs = np.frombuffer(offsets, np.int64).tolist()
    return [str(data[a:b], "utf-8") for a, b in pairwise(offs)]


def _string_array(data: bytes, offsets: bytes, valid: np.ndarray | None = None) -> pa.Array:
    n = len(offsets) // 8 - 1
    bitmap = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    arr = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), bitmap)
    return arr.cast(pa.string())


class _Scanned:
    """One scan result, compacted to the object events with usable args (the rows of EventColumns).

    All raw spans (odd values, header) are decoded here, so the caller can free the input bytes.
    """

    def __init__(self, res: dict[str, Any], mv: memoryview) -> None:
        self.res = res
        n_all = res["n"]
        ok = np.frombuffer(res["event_ok"], np.uint8).astype(bool)
        args_st = np.frombuffer(res["args_status"], np.uint8)
        bad_args = ok & (args_st == 2)
        self.rejected: Counter[str] = Counter()
        if not ok.all():
            self.rejected["not_an_object"] = int((~ok).sum())
        if bad_args.any():
            self.rejected["malformed_args"] = int(bad_args.sum())
        self.n_read = n_all
        self.keep: np.ndarray | None = None  # None: every event is kept, rows are unchanged
        self.remap = np.arange(n_all, dtype=np.int64)
        if self.rejected:
            self.keep = np.flatnonzero(ok & ~bad_args)
            self.remap = np.full(n_all, -1, np.int64)
            self.remap[self.keep] = np.arange(len(self.keep))
        self.n = n_all if self.keep is None else len(self.keep)
        self.args_st = self.dense(args_st)
        self.rich = self.dense(np.frombuffer(res["rich"], np.uint8))
        self.header = {
            k: None if span is None else decode_value(mv[span[0] : span[1]])
            for k, span in res["header"].items()
        }
        # odd values: decoded now, by the rules of the msgspec path, while the input is alive
        odd = np.frombuffer(res["odd"], np.int64).reshape(-1, 4)
        self.odd: dict[int, tuple[np.ndarray, list[Any]]] = {}
        for f in np.unique(odd[:, 1]).tolist():
            sel = odd[odd[:, 1] == f]
            rows = self.remap[sel[:, 0]]
            sel, rows = sel[rows >= 0], rows[rows >= 0]
            self.odd[f] = (rows, [decode_value(mv[a:b]) for a, b in sel[:, 2:].tolist()])

    def dense(self, arr: np.ndarray) -> np.ndarray:
        return arr if self.keep is None else arr[self.keep]

    def rows_of(self, rows_bytes: bytes) -> tuple[np.ndarray, np.ndarray]:
        """A sparse table's rows in the compacted numbering, and which of its entries survive."""
        rows = self.remap[np.frombuffer(rows_bytes, np.int64)]
        return rows, rows >= 0

    def position(self, rows: np.ndarray) -> np.ndarray:
        """Row → index into a sparse table (-1 where the row has no entry)."""
        pos = np.full(self.n, -1, np.int32 if len(rows) < 2**31 else np.int64)
        pos[rows] = np.arange(len(rows))
        return pos

    # ---- columns -----------------------------------------------------------------------------

    def dict_column(self, key: str) -> pa.DictionaryArray:
        codes_b, (data, offsets) = self.res[key]
        codes = self.dense(np.frombuffer(codes_b, np.int32))
        missing = codes < 0
        indices = pa.array(codes, mask=missing) if missing.any() else pa.array(codes)
        return pa.DictionaryArray.from_arrays(indices, _string_array(data, offsets))

    def values(self, f: int) -> tuple[np.ndarray, np.ndarray]:
        vals, st = self.res[_FIELDS[f]][:2]
        return self.dense(np.frombuffer(vals, np.int64)), self.dense(np.frombuffer(st, np.uint8))

    def patched(self, f: int, rows: np.ndarray | None, rule: Any) -> Times:
        """int64 values of field f (all rows, or the given ones), odd values converted by ``rule``."""
        vals, st = self.values(f)
        if rows is not None:
            vals, st = vals[rows], st[rows]
        valid = st == _OK
        odd_rows, odd_vals = self.odd.get(f, (np.zeros(0, np.int64), []))
        if len(odd_rows) and (st == _ODD).any():
            vals = vals.copy()
            where = np.arange(len(st)) if rows is None else rows
            k = np.searchsorted(odd_rows, where).clip(0, len(odd_rows) - 1)
            for j in np.flatnonzero(odd_rows[k] == where).tolist():
                v = rule(odd_vals[k[j]])
                if v is not None:
                    vals[j], valid[j] = v, True
        return Times(vals, valid)

    def ints(self, f: int, rows: np.ndarray) -> pa.Array:
        return self.patched(f, rows, col.one_int).arrow()

    def id_column(self, f: int) -> IdColumn:
        vals, st, dictionary, codes_b, kinds_b, keys_b = self.res[_FIELDS[f]]
        strings = _strings(*dictionary)
        if f in self.odd:  # some value is neither int nor string: the value list msgspec would see
            vals, st = self.values(f)
            values: list[Any] = [None] * len(st)
            for j in np.flatnonzero(st == _OK).tolist():
                values[j] = int(vals[j])
            for j in np.flatnonzero(st == _STR).tolist():
                values[j] = strings[vals[j]]
            for j, v in zip(*self.odd[f], strict=True):
                values[j] = v
            return IdColumn.of(*col.id_map(values))
        # the scanner's keys, in order of first appearance
        keys = [
            None if k == 0 else (v if k == _OK else strings[v])
            for k, v in zip(
                np.frombuffer(kinds_b, np.uint8).tolist(),
                np.frombuffer(keys_b, np.int64).tolist(),
                strict=True,
            )
        ]
        codes = self.dense(np.frombuffer(codes_b, np.int32))
        if self.keep is not None:  # a dropped event may have shown a value first: rank them again
            first = np.full(len(keys), self.n, np.int64)
            np.minimum.at(first, codes, np.arange(self.n))
            present = np.flatnonzero(first < self.n)
            order = present[np.argsort(first[present], kind="stable")]
            rank = np.full(len(keys), -1, np.int32)
            rank[order] = np.arange(len(order))
            codes, keys = rank[codes], [keys[k] for k in order.tolist()]
        return IdColumn.of(*col.assign_ids(keys, codes))

    def flow_ids(self, rows: np.ndarray) -> pa.Array:
        vals, st = self.values(_ID)
        v, s = vals[rows], st[rows]
        out = pc.if_else(pa.array(s == _OK), pc.cast(pa.array(v), pa.string()), pa.scalar(None, pa.string()))
        if (s == _STR).any():
            strings = pa.array(_strings(*self.res["id"][2]), pa.string())
            named = pc.take(strings, pa.array(np.where(s == _STR, v, 0)))
            out = pc.if_else(pa.array(s == _STR), named, out)
        if (s == _ODD).any():
            odd_rows, odd_vals = self.odd[_ID]
            k = np.searchsorted(odd_rows, rows).clip(0, len(odd_rows) - 1)
            texts: list[str | None] = [None] * len(rows)
            for j in np.flatnonzero((s == _ODD) & (odd_rows[k] == rows)).tolist():
                texts[j] = str(odd_vals[k[j]])
            out = pc.if_else(pa.array(s == _ODD), pa.array(texts, pa.string()), out)
        return out

    def columns(self) -> EventColumns:
        arows, alive = self.rows_of(self.res["args_raw"][0])
        decoded = ARGS_LIST_DECODER.decode(self.res["args_raw"][1])  # the texts, as one JSON array
        args_pos = self.position(arows[alive])
        args_at = np.flatnonzero(alive)  # entry index of each surviving args text
        srows, s_alive = self.rows_of(self.res["shapes"][0])
        sh = self.res["shapes"]
        shape_pos = self.position(srows[s_alive])
        s_at = np.flatnonzero(s_alive)
        dims_valid = np.frombuffer(sh[3], np.uint8).astype(bool)
        dims_text = _string_array(sh[2], sh[1], dims_valid)
        type_text = _string_array(sh[5], sh[4], np.frombuffer(sh[6], np.uint8).astype(bool))
        args_st, rich = self.args_st, self.rich

        def args(rows: np.ndarray) -> list[EventArgs | None]:
            out: list[EventArgs | None] = []
            for r, p in zip(rows.tolist(), args_pos[rows].tolist(), strict=True):
                if p >= 0:
                    out.append(decoded[args_at[p]])
                else:
                    out.append(EMPTY_ARGS if args_st[r] == 1 else None)
            return out

        def rich_candidates(rows: np.ndarray) -> np.ndarray:
            return np.flatnonzero(rich[rows] & 1)

        def has_dims(rows: np.ndarray) -> np.ndarray:
            p = shape_pos[rows]
            has = p >= 0
            has[has] = dims_valid[s_at[p[has]]]
            return has

        def shape_texts(rows: np.ndarray) -> tuple[pa.Array, pa.Array]:
            if not len(s_at):
                return pa.nulls(len(rows), pa.string()), pa.nulls(len(rows), pa.string())
            p = shape_pos[rows]
            none = p < 0
            entries = pa.array(s_at[np.where(none, 0, p)], mask=none)
            return pc.take(dims_text, entries), pc.take(type_text, entries)

        eager = {
            "ph": self.dict_column("ph"),
            "name": self.dict_column("name"),
            "cat": self.dict_column("cat"),
            "ts": self.patched(_TS, None, col.one_ns),
            "dur": self.patched(_DUR, None, col.one_ns),
            "pid": self.id_column(_PID),
            "tid": self.id_column(_TID),
        }
        # what the functions of rows below never read again goes with its last view (the
        # columns above, once the reader or kineto.merge is done with them): ≈ 60 bytes an event
        for key in (*eager, "args_raw"):
            self.res.pop(key, None)
        return EventColumns(
            decoder="c",
            n_read=self.n_read,
            rejected=self.rejected,
            header=self.header,
            **eager,
            corr=lambda rows: self.ints(_CORR, rows),
            external_id=lambda rows: self.ints(_EXT, rows),
            flow_ids=self.flow_ids,
            args=args,
            rich_candidates=rich_candidates,
            has_dims=has_dims,
            shape_texts=shape_texts,
        )
