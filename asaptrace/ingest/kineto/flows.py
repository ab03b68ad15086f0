"""The flows table of a Kineto trace: the ``s``/``t``/``f`` events that link a CPU launch to its kernel.

Why a module: flows are their own table with their own rejection (``bad_flow``: no id or no time);
the reader hands it the flow rows and their times and merges the rejections into its accounting.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa

from asaptrace.ingest.kineto.decode import EventColumns, Times
from asaptrace.ingest.kineto.dictionary import strings_at
from asaptrace.schema import FLOWS_SCHEMA


def kept_flows(ids: pa.Array, ts_valid: np.ndarray) -> np.ndarray:
    """Which flow rows are kept (``ids``: their flow ids; ``ts_valid``: whether their time is
    usable): those with an id and a time (the others are ``bad_flow``)."""
    return ids.is_valid().to_numpy(zero_copy_only=False) & ts_valid


def flows(
    c: EventColumns, idx: np.ndarray, ts: Times, ids: pa.Array | None = None
) -> tuple[pa.Table, Counter[str]]:
    """The flows table of the rows ``idx`` (flow phases; ``ids``: their flow ids when already
    known) and the rows rejected for want of an id or a time."""
    rej: Counter[str] = Counter()
    ids = c.flow_ids(idx) if ids is None else ids
    ok = kept_flows(ids, ts.valid[idx])
    if (~ok).any():
        rej["bad_flow"] += int((~ok).sum())
    keep = idx[ok]
    table = pa.table(
        {
            "rank": pa.array(np.full(len(keep), -1, np.int32)),
            "flow_id": ids.filter(pa.array(ok)),
            "phase": strings_at(c.ph, keep),
            "cat": strings_at(c.cat, keep),
            "name": strings_at(c.name, keep),
            "pid": pa.array(c.pid.ids[keep], pa.int32()),
            "stream": pa.array(c.tid.ids[keep], pa.int32()),
            "ts_ns": pa.array(ts.values[keep]),
        },
        schema=FLOWS_SCHEMA,
    )
    return table, rej
