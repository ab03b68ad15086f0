"""The columns of a file read in pieces, joined into the columns of the whole file.

Each piece's :class:`~asaptrace.ingest.kineto.decode.EventColumns` numbers its own rows,
dictionaries and pid/tid keys. Joined here they are what one scan of the whole file gives: rows
in file order; dictionary values and pid/tid keys in order of first appearance, so the pid/tid
ids (ints kept, other values fresh negative ids in that order,
:func:`~asaptrace.ingest.columns.assign_ids`) are the whole file's; each header value from the
last piece holding it (a repeated key: the last wins, as in one scan); the functions of rows ask
the pieces that hold those rows. Nothing after the join knows the file came in pieces.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from asaptrace.ingest import columns as col
from asaptrace.ingest.kineto.decode import EventArgs, EventColumns, IdColumn, Times

T = TypeVar("T")


@dataclass(frozen=True)
class Piece:
    """One piece's columns, and which header keys its document held (a key held with the value
    null is held: it overrides an earlier piece's value, as a repeated key does in one scan)."""

    cols: EventColumns
    header_present: frozenset[str]


def merge(pieces: Sequence[Piece]) -> EventColumns:
    """The columns of the whole file from its pieces' (in file order)."""
    if len(pieces) == 1:
        return pieces[0].cols
    cs = [p.cols for p in pieces]
    rows = _Rows(np.cumsum([0] + [c.n for c in cs], dtype=np.int64))
    header: dict[str, Any] = {}
    for p in pieces:
        for k, v in p.cols.header.items():
            if k in p.header_present or k not in header:
                header[k] = v
    return EventColumns(
        decoder=cs[0].decoder,
        n_read=sum(c.n_read for c in cs),
        rejected=sum((Counter(c.rejected) for c in cs), Counter()),
        header=header,
        ph=_dictionaries([c.ph for c in cs]),
        name=_dictionaries([c.name for c in cs]),
        cat=_dictionaries([c.cat for c in cs]),
        ts=_times([c.ts for c in cs]),
        dur=_times([c.dur for c in cs]),
        pid=_ids([c.pid for c in cs]),
        tid=_ids([c.tid for c in cs]),
        corr=rows.arrays([c.corr for c in cs]),
        external_id=rows.arrays([c.external_id for c in cs]),
        flow_ids=rows.arrays([c.flow_ids for c in cs]),
        args=rows.lists([c.args for c in cs]),
        rich_candidates=rows.positions([c.rich_candidates for c in cs]),
        has_dims=rows.bools([c.has_dims for c in cs]),
        shape_texts=rows.array_pairs([c.shape_texts for c in cs]),
    )


def _dictionaries(arrs: list[pa.DictionaryArray]) -> pa.DictionaryArray:
    """Dictionary columns joined, values in order of first appearance (null stays null)."""
    values: dict[str, int] = {}
    parts = []
    for a in arrs:
        remap = np.array(
            [values.setdefault(v, len(values)) for v in a.dictionary.to_pylist()] + [-1], np.int32
        )
        parts.append(remap[a.indices.fill_null(-1).to_numpy(zero_copy_only=False)])
    codes = np.concatenate(parts)
    missing = codes < 0
    indices = pa.array(codes, mask=missing) if missing.any() else pa.array(codes)
    return pa.DictionaryArray.from_arrays(indices, pa.array(list(values), pa.string()))


def _times(parts: list[Times]) -> Times:
    return Times(np.concatenate([t.values for t in parts]), np.concatenate([t.valid for t in parts]))


def _ids(parts: list[IdColumn]) -> IdColumn:
    """pid/tid columns joined: the source values in order of first appearance over the pieces
    (each piece's table lists its values in that order, :func:`~asaptrace.ingest.columns.assign_ids`),
    given the ids one scan of the whole file gives them."""
    keys: dict[Any, int] = {}
    codes = []
    for c in parts:
        index = {i: keys.setdefault(k, len(keys)) for k, i in c.table.items()}  # ids distinct in a piece
        ids = np.array(sorted(index), np.int64)
        key_index = np.array([index[i] for i in ids.tolist()], np.int64)
        codes.append(key_index[np.searchsorted(ids, c.ids)] if len(ids) else np.zeros(0, np.int64))
    return IdColumn.of(*col.assign_ids(list(keys), np.concatenate(codes)))


class _Rows:
    """Functions of rows (whole-file positions) answered by the pieces holding those rows."""

    def __init__(self, starts: np.ndarray) -> None:
        self.starts = starts  # piece p holds rows starts[p] .. starts[p + 1] - 1

    def split(self, rows: np.ndarray) -> tuple[np.ndarray | None, list[tuple[int, int, int, np.ndarray]]]:
        """(the sorting permutation, or None when ``rows`` is sorted; per piece holding some:
        (piece, first and past-last position in the sorted rows, its own row numbers))."""
        rows = np.asarray(rows, dtype=np.int64)
        order = None
        if len(rows) > 1 and bool((rows[1:] < rows[:-1]).any()):
            order = np.argsort(rows, kind="stable")
            rows = rows[order]
        bounds = np.searchsorted(rows, self.starts)
        parts = [
            (p, int(bounds[p]), int(bounds[p + 1]), rows[bounds[p] : bounds[p + 1]] - self.starts[p])
            for p in range(len(self.starts) - 1)
            if bounds[p] < bounds[p + 1]
        ]
        return order, parts

    def _gather(
        self, fns: list[Callable[[np.ndarray], T]], rows: np.ndarray
    ) -> tuple[np.ndarray | None, list[T]]:
        order, parts = self.split(rows)
        if not parts:
            return None, [fns[0](np.zeros(0, np.int64))]
        return order, [fns[p](local) for p, _, _, local in parts]

    def arrays(self, fns: list[Callable[[np.ndarray], pa.Array]]) -> Callable[[np.ndarray], pa.Array]:
        def joined(rows: np.ndarray) -> pa.Array:
            order, outs = self._gather(fns, rows)
            return _unsorted(_concat(outs), order)

        return joined

    def array_pairs(
        self, fns: list[Callable[[np.ndarray], tuple[pa.Array, pa.Array]]]
    ) -> Callable[[np.ndarray], tuple[pa.Array, pa.Array]]:
        def joined(rows: np.ndarray) -> tuple[pa.Array, pa.Array]:
            order, outs = self._gather(fns, rows)
            return (
                _unsorted(_concat([a for a, _ in outs]), order),
                _unsorted(_concat([b for _, b in outs]), order),
            )

        return joined

    def bools(self, fns: list[Callable[[np.ndarray], np.ndarray]]) -> Callable[[np.ndarray], np.ndarray]:
        def joined(rows: np.ndarray) -> np.ndarray:
            order, outs = self._gather(fns, rows)
            out = np.concatenate(outs)
            if order is None:
                return out
            back = np.empty_like(out)
            back[order] = out
            return back

        return joined

    def lists(
        self, fns: list[Callable[[np.ndarray], list[EventArgs | None]]]
    ) -> Callable[[np.ndarray], list[EventArgs | None]]:
        def joined(rows: np.ndarray) -> list[EventArgs | None]:
            order, outs = self._gather(fns, rows)
            flat = [v for out in outs for v in out]
            if order is None:
                return flat
            back: list[EventArgs | None] = [None] * len(flat)
            for i, v in zip(order.tolist(), flat, strict=True):
                back[i] = v
            return back

        return joined

    def positions(self, fns: list[Callable[[np.ndarray], np.ndarray]]) -> Callable[[np.ndarray], np.ndarray]:
        """For functions answering positions into the rows they are given."""

        def joined(rows: np.ndarray) -> np.ndarray:
            order, parts = self.split(rows)
            found = [fns[p](local) + a for p, a, _, local in parts]
            pos = np.concatenate(found) if found else np.zeros(0, np.int64)
            return pos if order is None else np.sort(order[pos])

        return joined


def _concat(arrs: list[pa.Array]) -> pa.Array:
    arrs = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrs]
    typ = next((a.type for a in arrs if not pa.types.is_null(a.type)), arrs[0].type)
    return pa.concat_arrays([a if a.type == typ else a.cast(typ) for a in arrs])


def _unsorted(arr: pa.Array, order: np.ndarray | None) -> pa.Array:
    """``arr`` (in sorted row order) back in the order the rows were asked in."""
    if order is None:
        return arr
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    return arr.take(pa.array(back))
