"""The streams table of a Kineto trace: one row per (pid, stream), named from the ``M`` metadata events.

Why a module: stream names come from two places (``process_name``/``process_labels``/``thread_name``
metadata, and the (pid, stream) pairs the kept events use), and the metadata also tells which pids
are devices (a ``GPU``/``NPU``/``XPU`` process label), which the reader needs before it builds events.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from asaptrace.ingest.kineto.decode import EventColumns
from asaptrace.ingest.kineto.dictionary import strings_at, text_of
from asaptrace.schema import STREAMS_SCHEMA


def streams_from_metadata(
    c: EventColumns, rows: np.ndarray
) -> tuple[dict[tuple[int, int | None], dict[str, Any]], set[int]]:
    """Collect process/thread names and labels from ``M`` events; returns rows keyed by (pid, tid|None)."""
    out: dict[tuple[int, int | None], dict[str, Any]] = {}
    gpu_pids: set[int] = set()
    names = strings_at(c.name, rows).to_pylist()
    for i, name, args in zip(rows.tolist(), names, c.args(rows), strict=True):
        if c.pid.missing[i] or args is None:
            continue
        pid = int(c.pid.ids[i])
        value = args.name if name in ("process_name", "thread_name") else args.labels
        if name == "process_name":
            out.setdefault((pid, None), {})["process_name"] = text_of(value)
        elif name == "process_labels":
            out.setdefault((pid, None), {})["process_label"] = text_of(value)
            if isinstance(value, str) and value.upper().startswith(("GPU", "NPU", "XPU")):
                gpu_pids.add(pid)
        elif name == "thread_name" and not c.tid.missing[i]:
            out.setdefault((pid, int(c.tid.ids[i])), {})["thread_name"] = text_of(value)
    return out, gpu_pids


def complete_streams(meta_rows: dict, events: pa.Table, pid_table: dict, tid_table: dict) -> pa.Table:
    """One row per (pid, stream) that has events or a thread name."""
    inv_pid = {v: k for k, v in pid_table.items()}
    inv_tid = {v: k for k, v in tid_table.items()}
    pairs = (
        events.group_by(["pid", "stream"]).aggregate([("is_device", "max")]).to_pylist()
        if events.num_rows
        else []
    )
    seen = {(r["pid"], r["stream"]): bool(r["is_device_max"]) for r in pairs}
    for pid, tid in meta_rows:
        if tid is not None and (pid, tid) not in seen:
            seen[(pid, tid)] = False
    out = []
    for (pid, stream), dev in sorted(seen.items()):
        proc = meta_rows.get((pid, None), {})
        thr = meta_rows.get((pid, stream), {})
        out.append(
            {
                "rank": -1,
                "pid": pid,
                "stream": stream,
                "is_device": dev,
                "source_pid": text_of(inv_pid.get(pid)),
                "source_tid": text_of(inv_tid.get(stream)),
                "process_name": proc.get("process_name"),
                "process_label": proc.get("process_label"),
                "thread_name": thr.get("thread_name"),
            }
        )
    return pa.Table.from_pylist(out, schema=STREAMS_SCHEMA)
