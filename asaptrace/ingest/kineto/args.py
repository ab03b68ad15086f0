"""The args table of a Kineto trace: collective metadata, step/layer annotation args and input shapes.

Why a module: only a few events carry args worth a row (NCCL kernels, ``record_param_comms`` ops,
annotations, ops of a ``record_shapes`` trace), and finding them cheaply — skipping categories that
never carry them, decoding only the rich rows — is a job of its own beside the events table.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.ingest import columns as col
from asaptrace.ingest.kineto.decode import EventArgs, EventColumns, is_rich
from asaptrace.ingest.kineto.dictionary import dict_mask, text_of
from asaptrace.schema import ANNOTATION_ARG_KEYS, ARGS_SCHEMA

#: ``extra``'s keys: the annotation args, and a CUDA event wait's record and stream (the critical path's
#: event record → wait edges, asaptrace.analyze._cp_graph)
_EXTRA_KEYS = (*ANNOTATION_ARG_KEYS, "wait_on_stream", "wait_on_cuda_event_record_corr_id")

_encode = msgspec.json.Encoder().encode


def json_texts(values: list[Any]) -> pa.Array:
    """JSON text of each value (strings kept as they are), null for None; one C call per value."""
    if all(v is None or isinstance(v, str) for v in values):  # the usual case: no encoding needed
        return pa.array(values, pa.string())
    encoded = list(map(_encode, values))
    arr = pa.array(encoded, pa.binary()).cast(pa.string())
    # strings are kept as written (not JSON-quoted); None stays null
    is_str = [isinstance(v, str) for v in values]
    if any(is_str):
        arr = pc.if_else(
            pa.array(is_str), pa.array([v if isinstance(v, str) else None for v in values], pa.string()), arr
        )
    return pc.if_else(pc.equal(arr, "null"), pa.scalar(None, pa.string()), arr)


#: Categories whose events never carry collective or step/layer annotation args. (cpu_op can:
#: ``record_param_comms`` ops carry the collective metadata.)
_PLAIN_CATS = frozenset({"cuda_runtime", "cuda_driver", "Runtime", "python_function"})


def args_table(c: EventColumns, idx: np.ndarray, cat: pa.DictionaryArray) -> pa.Table:
    """Rows for events that carry collective metadata, step/layer annotation args, or input shapes.

    Shapes are common (on every cpu_op of a ``record_shapes`` trace) and fill three columns from
    the raw text; the rare rich rows (NCCL kernels, annotations) are decoded and fill all of them.
    The table is built in event order directly (rows = rich ∪ shapes), so nothing is sorted.
    """
    maybe_rich = np.flatnonzero(~dict_mask(cat, _PLAIN_CATS))
    cand = maybe_rich[c.rich_candidates(idx[maybe_rich])]
    rich: list[int] = []
    rich_args: list[EventArgs] = []
    for j, a in zip(cand.tolist(), c.args(idx[cand]), strict=True):
        if is_rich(a):
            rich.append(j)
            rich_args.append(a)  # type: ignore[arg-type]
    rich_pos = np.array(rich, np.int64)
    in_table = c.has_dims(idx)
    in_table[rich_pos] = True
    rows = np.flatnonzero(in_table)  # positions into idx, in event order
    eids = idx[rows]
    n = len(rows)
    at = np.searchsorted(rich_pos, rows)
    is_r = at < len(rich_pos)
    is_r[is_r] = rich_pos[at[is_r]] == rows[is_r]
    rich_index = pa.array(np.where(is_r, at, 0), mask=~is_r)  # row → its rich entry (null: shapes only)
    dims, types = c.shape_texts(eids)
    cols: dict[str, pa.Array] = {
        "rank": pa.array(np.full(n, -1, np.int32)),
        "eid": pa.array(eids.astype(np.int64)),
        "external_id": c.external_id(eids),
        "input_dims": dims,
        "input_type": types,
    }
    for name, arr in rich_columns(rich_args).items():
        cols[name] = pc.take(arr, rich_index) if rich_args else pa.nulls(n, arr.type)
    return pa.table({f.name: cols[f.name] for f in ARGS_SCHEMA}, schema=ARGS_SCHEMA)


def rich_columns(sel: list[EventArgs]) -> dict[str, pa.Array]:
    """The columns only rich rows fill, one entry per rich row."""

    def field(name: str) -> list[Any]:
        return list(map(attrgetter(name), sel))

    extra_cols = [field(k) for k in _EXTRA_KEYS]
    has_extra = np.zeros(len(sel), bool)
    for values in extra_cols:
        has_extra |= np.fromiter((v is not None for v in values), bool, len(sel))
    extra: list[str | None] = [None] * len(sel)
    for i in np.flatnonzero(has_extra).tolist():
        extra[i] = _encode(
            {k: v[i] for k, v in zip(_EXTRA_KEYS, extra_cols, strict=True) if v[i] is not None}
        ).decode()
    return {
        "collective": col.strings(field("collective")),
        "in_nelems": col.int_values(field("in_nelems")),
        "out_nelems": col.int_values(field("out_nelems")),
        "group_size": col.int_values(field("group_size"), pa.int32()),
        "dtype": col.strings(field("dtype")),
        "pg_name": col.strings([text_of(v) for v in field("pg_name")]),
        "pg_desc": col.strings([text_of(v) for v in field("pg_desc")]),
        "pg_ranks": json_texts(field("pg_ranks")),
        "in_split": json_texts(field("in_split")),
        "out_split": json_texts(field("out_split")),
        "extra": pa.array(extra, pa.string()),
    }
