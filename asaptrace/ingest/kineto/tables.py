"""The Kineto reader's shared downstream: per-event columns → canonical tables, with balanced accounting.

Both decoders (:mod:`~asaptrace.ingest.kineto.cscan`, :mod:`~asaptrace.ingest.kineto.decode`) give
:class:`~asaptrace.ingest.kineto.decode.EventColumns`; everything after that is here — phase masks,
B/E matching, rejections, the events, args, flows and streams tables, the accounting — and is
shared by the one-piece read (:mod:`~asaptrace.ingest.kineto.reader`), the piecewise read's joined
columns (:mod:`~asaptrace.ingest.kineto.merge`) and a big file's rest once its plain host rows
went to chunks (:mod:`~asaptrace.ingest.kineto.split`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.accounting import Accounting
from asaptrace.errors import CorruptTrace
from asaptrace.ingest import columns as col
from asaptrace.ingest.base import IngestResult
from asaptrace.ingest.kineto.args import args_table
from asaptrace.ingest.kineto.decode import EventColumns, Times
from asaptrace.ingest.kineto.dictionary import dict_codes, dict_mask
from asaptrace.ingest.kineto.flows import flows
from asaptrace.ingest.kineto.rank import device_model, rank_info
from asaptrace.ingest.kineto.streams import complete_streams, streams_from_metadata
from asaptrace.schema import EVENTS_SCHEMA, Kind

FORMAT_NAME = "kineto"

#: Categories of device activity (current and older Kineto spellings).
DEVICE_CATS = frozenset(
    {
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "gpu_user_annotation",
        "Kernel",
        "Memcpy",
        "Memset",
        "Memcpy_async",
    }
)

#: Kind before the taxonomy refines it by name: only what the category alone says.
CATEGORY_KIND: dict[str, str] = {
    "kernel": Kind.COMPUTE,
    "Kernel": Kind.COMPUTE,
    "gpu_memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMCPY,
    "Memcpy": Kind.MEMCPY,
    "Memset": Kind.MEMCPY,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.ANNOTATION,
    "cpu_op": Kind.HOST,
    "Operator": Kind.HOST,
    "cuda_runtime": Kind.HOST,
    "cuda_driver": Kind.HOST,
    "Runtime": Kind.HOST,
    "python_function": Kind.HOST,
    "Trace": Kind.ANNOTATION,
}

SPAN_PHASES = ("X", "B", "i", "I", "R")
FLOW_PHASES = ("s", "t", "f")
INSTANT_PHASES = ("i", "I", "R")


class Phases:
    """Boolean masks of the events whose ``ph`` is one of some phases (decided once per distinct
    phase string, then gathered by dictionary code)."""

    def __init__(self, ph: pa.DictionaryArray) -> None:
        self.values = ph.dictionary.to_pylist()
        self.codes = ph.indices.fill_null(-1).to_numpy(zero_copy_only=False)

    def mask(self, phases: tuple[str, ...]) -> np.ndarray:
        hit = np.array([v in phases for v in self.values] + [False], dtype=bool)  # [-1]: no phase
        return hit[self.codes]

    def count(self, where: np.ndarray) -> Counter[str | None]:
        """Events per phase string (None: no phase) among ``where``."""
        codes = self.codes[where]
        out: Counter[str | None] = Counter()
        missing = int((codes < 0).sum())
        if missing:
            out[None] = missing
        for code, c in enumerate(np.bincount(codes[codes >= 0], minlength=len(self.values)).tolist()):
            if c:
                out[self.values[code]] += c
        return out


@dataclass(frozen=True)
class Outside:
    """Events of the file kept out of its tables, each read and kept (a big file's host rows and
    flows, written in chunks: :mod:`asaptrace.ingest.kineto.split`): how many host rows, their
    distinct (pid, stream, is_device) for the streams table, and how many flows."""

    rows: int
    streams: pa.Table
    flows: int = 0


def base_time_ns(header: dict[str, Any]) -> int:
    """The file's ``baseTimeNanoseconds`` (0 when absent or not a usable int)."""
    base = header.get("baseTimeNanoseconds")
    ok = isinstance(base, int) and not isinstance(base, bool) and col.INT64_MIN <= base <= col.INT64_MAX
    return base if ok else 0


def tables_of(
    c: EventColumns, path: Path, *, eids: np.ndarray | None = None, outside: Outside | None = None
) -> IngestResult:
    """The shared downstream: per-event columns → canonical tables with balanced accounting.
    ``eids``: each row's event id when the columns hold only some of the file's rows (its place
    in the file; default: the row's own place); ``outside``: the rows kept out of the tables."""
    if c.n_read == 0:
        raise CorruptTrace("no events ('traceEvents' is empty)", path=path)
    rejected: Counter[str] = Counter(c.rejected)
    base_ns = base_time_ns(c.header)
    ts = shifted_times(c.ts, base_ns)
    ph = Phases(c.ph)
    is_span = ph.mask(SPAN_PHASES)
    is_end = ph.mask(("E",))
    is_flow = ph.mask(FLOW_PHASES)
    is_meta = ph.mask(("M",))
    is_other = ~(is_span | is_end | is_flow | is_meta)

    # phases we do not keep
    if is_other.any():
        for p, k in ph.count(is_other).items():
            rejected["missing_phase" if p is None else f"unsupported_phase:{p}"] += k

    # ---- metadata → streams table
    meta_rows = np.flatnonzero(is_meta)
    meta_streams, gpu_pids = streams_from_metadata(c, meta_rows)
    kept: Counter[str] = Counter()
    kept["metadata"] = len(meta_rows)

    # ---- flows
    flow_table, flow_rej = flows(c, np.flatnonzero(is_flow), ts)
    rejected.update(flow_rej)
    kept["flows"] = flow_table.num_rows + (outside.flows if outside else 0)

    # ---- spans (X, B/E matched, instants)
    span_mask = is_span.copy()
    dur_np, dur_ok = c.dur.values.copy(), c.dur.valid.copy()
    instants = ph.mask(INSTANT_PHASES)
    dur_np[instants] = 0
    dur_ok[instants] = True
    ts_np, ts_ok = ts.values, ts.valid
    is_begin = ph.mask(("B",))
    merged_ends = 0
    if is_end.any() or is_begin.any():
        merged_ends, be_rej = _match_begin_end(
            is_begin, is_end, c.pid.ids, c.tid.ids, ts_np, ts_ok, dur_np, dur_ok, span_mask
        )
        rejected.update(be_rej)
        rejected["unmatched_end"] += int(is_end.sum()) - merged_ends
    name_ok = c.name.is_valid().to_numpy(zero_copy_only=False)
    reasons = [
        ("missing_name", ~name_ok),
        ("missing_pid_or_tid", c.pid.missing | c.tid.missing),
        ("bad_ts", ~ts_ok),
        ("bad_dur", ~dur_ok),
        ("negative_dur", dur_ok & (dur_np < 0)),
    ]
    good = span_mask
    for reason, bad in reasons:
        hit = good & bad
        if hit.any():
            rejected[reason] += int(hit.sum())
            good &= ~hit
    idx = np.flatnonzero(good)
    kept["events"] = len(idx) + merged_ends + (outside.rows if outside else 0)

    ev_cat = pc.take(c.cat, pa.array(idx))
    is_device = dict_mask(ev_cat, DEVICE_CATS) | np.isin(c.pid.ids[idx], np.array(sorted(gpu_pids), np.int32))
    events = events_table(
        c, idx, ev_cat, is_device, ts_np[idx], dur_np[idx], idx if eids is None else eids[idx]
    )
    arg_rows = args_table(c, idx, ev_cat)
    if eids is not None:
        at = arg_rows.schema.get_field_index("eid")
        arg_rows = arg_rows.set_column(at, "eid", pa.array(eids[arg_rows.column(at).to_numpy()]))
    used = events.select(["pid", "stream", "is_device"])
    if outside is not None:
        used = pa.concat_tables([used, outside.streams.cast(used.schema)])
    streams = complete_streams(meta_streams, used, c.pid.table, c.tid.table)
    read = c.n_read + (outside.rows + outside.flows if outside else 0)
    acc = Accounting(read=read, kept=kept, rejected=rejected).check(str(path))
    unit = c.header.get("displayTimeUnit")
    info = rank_info(c.header, events)
    return IngestResult(
        path=str(path),
        format=FORMAT_NAME,
        events=events,
        args=arg_rows,
        flows=flow_table,
        streams=streams,
        accounting=acc,
        rank_info=info,
        notes={
            "display_time_unit": unit if isinstance(unit, str) else None,
            "base_time_ns": base_ns or None,
            "device_model": device_model(c.header, info.device),
        },
    )


def events_table(
    c: EventColumns,
    idx: np.ndarray,
    cat: pa.DictionaryArray,
    is_device: np.ndarray,
    ts: np.ndarray,
    dur: np.ndarray,
    eid: np.ndarray,
) -> pa.Table:
    """The events table of the rows ``idx`` (their categories ``cat``, device flags, times,
    durations and event ids given: what the whole file decides for them); rank -1."""
    n = len(idx)
    return pa.table(
        {
            "rank": pa.array(np.full(n, -1, np.int32)),
            "pid": pa.array(c.pid.ids[idx], pa.int32()),
            "stream": pa.array(c.tid.ids[idx], pa.int32()),
            "is_device": pa.array(is_device),
            "kind": kind_from_category(cat, is_device),
            "name": pc.take(c.name, pa.array(idx)),
            "cat": cat,
            "ts_ns": pa.array(ts),
            "dur_ns": pa.array(dur.astype(np.int64)),
            "step": pa.nulls(n, pa.int32()),
            "layer": pa.nulls(n, pa.int16()),
            "micro_batch": pa.nulls(n, pa.int8()),
            "corr": c.corr(idx),
            "eid": pa.array(eid.astype(np.int64)),
        },
        schema=EVENTS_SCHEMA,
    )


def shifted_times(ts: Times, base_ns: int) -> Times:
    """ts + baseTimeNanoseconds; a sum beyond int64 is an unusable time, never a wrap."""
    if not base_ns:
        return ts
    v = ts.values
    fits = v <= col.INT64_MAX - base_ns if base_ns > 0 else v >= col.INT64_MIN - base_ns
    return Times(np.where(fits, v, 0) + np.int64(base_ns), ts.valid & fits)


_KINDS = sorted({str(k) for k in CATEGORY_KIND.values()} | {str(Kind.OTHER), str(Kind.HOST)})
_KIND_CODE = {k: i for i, k in enumerate(_KINDS)}


def kind_from_category(cat: pa.DictionaryArray, is_device: np.ndarray) -> pa.DictionaryArray:
    """Dictionary-encoded kind: the category's kind where it names one, else device → other, host."""
    by_entry = np.array(
        [_KIND_CODE[str(CATEGORY_KIND[v])] if v in CATEGORY_KIND else -1 for v in cat.dictionary.to_pylist()]
        + [-1],
        np.int32,
    )
    codes = by_entry[dict_codes(cat)]
    fallback = np.where(is_device, _KIND_CODE[str(Kind.OTHER)], _KIND_CODE[str(Kind.HOST)]).astype(np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(np.where(codes >= 0, codes, fallback)), pa.array(_KINDS))


def _match_begin_end(
    is_begin: np.ndarray,
    is_end: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    ts: np.ndarray,
    ts_ok: np.ndarray,
    dur: np.ndarray,
    dur_ok: np.ndarray,
    span_mask: np.ndarray,
) -> tuple[int, Counter[str]]:
    """Pair B with the next E on the same (pid, tid) stack; writes the B's duration into ``dur``.

    Events are taken in time order (no time last, ties by file order). Unmatched B events are
    dropped from ``span_mask`` and rejected; returns (ends merged, rejections).
    """
    rows = np.flatnonzero(is_begin | is_end)
    order = rows[np.lexsort((rows, np.where(ts_ok[rows], ts[rows], 0), ~ts_ok[rows]))]
    stacks: dict[tuple[int, int], list[int]] = {}
    merged = 0
    rej: Counter[str] = Counter()
    for i in order.tolist():
        key = (int(pid[i]), int(tid[i]))
        if is_begin[i]:
            stacks.setdefault(key, []).append(i)
        else:
            stack = stacks.get(key)
            if stack and ts_ok[i] and ts_ok[stack[-1]]:
                b = stack.pop()
                dur[b] = ts[i] - ts[b]
                dur_ok[b] = True
                merged += 1
    for stack in stacks.values():
        for b in stack:
            span_mask[b] = False
            rej["unmatched_begin"] += 1
    return merged, rej
