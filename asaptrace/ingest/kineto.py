"""PyTorch profiler (Kineto) Chrome-trace JSON → canonical tables.

Accepts ``.json`` and ``.json.gz`` (gzip detected by content), a top-level object with
``traceEvents`` or a bare list of events; ``ts``/``dur`` as int, float or string µs (Chrome trace
times are µs whatever ``displayTimeUnit`` says — that key only sets the viewer's display unit and is
recorded in meta); ``baseTimeNanoseconds`` is added to every time when present (Kineto writes times
relative to it). Phases: complete ``X``; ``B``/``E`` pairs matched per (pid, tid); instants ``i``/``I``
/``R`` (dur 0); flows ``s``/``t``/``f`` (flows table); metadata ``M`` (streams table). Other phases
(counters ``C``, async ``b``/``e``/``n``, samples, objects) are counted as rejected with their phase
in the reason. Every event read is kept or rejected: ``read == kept + Σ rejected``.

The fast path decodes the whole file with msgspec into typed structs (≈ 1 µs per event) and builds
columns with Arrow; an event of the wrong shape makes the file go through a per-event lenient path
that rejects just that event.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.accounting import Accounting
from asaptrace.errors import CorruptTrace
from asaptrace.ingest import _columns as col
from asaptrace.ingest.base import Format, IngestOptions, IngestResult, RankInfo, dictionary, register_format
from asaptrace.ingest.source import read_source_bytes
from asaptrace.schema import ARGS_SCHEMA, EVENTS_SCHEMA, FLOWS_SCHEMA, STREAMS_SCHEMA, Kind

FORMAT_NAME = "kineto"

#: Categories of device activity (current and older Kineto spellings).
DEVICE_CATS = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Kernel", "Memcpy", "Memset", "Memcpy_async"}
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


_NO_RAW = msgspec.Raw(b"")


class _Args(msgspec.Struct, gc=False):
    """The arguments we keep; every other key is skipped by the decoder."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    in_split: Any = msgspec.field(default=None, name="In split size")
    out_split: Any = msgspec.field(default=None, name="Out split size")
    # shapes stay raw JSON text: no Python objects are built for them (they are on every cpu_op)
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    # metadata events
    name: Any = None
    labels: Any = None
    # step / layer annotations (asaptrace synth writes these; serving engines may too)
    step: Any = None
    layer: Any = None
    micro_batch: Any = None
    dp_group: Any = None
    seq_lens: Any = None
    cached_lens: Any = None
    request_ids: Any = None


_RARE = ("collective", "in_nelems", "pg_ranks", "step", "layer", "seq_lens", "dp_group", "micro_batch")
_EXTRA_KEYS = ("step", "layer", "micro_batch", "dp_group", "seq_lens", "cached_lens", "request_ids")


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: _Args | None = None


class _Trace(msgspec.Struct):
    traceEvents: list[_Event] | None = None  # noqa: N815 (the file's key)
    distributedInfo: Any = None  # noqa: N815
    displayTimeUnit: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815


_trace_decoder = msgspec.json.Decoder(_Trace)
_list_decoder = msgspec.json.Decoder(list[_Event])


def sniff(path: Path, head: bytes) -> bool:
    """A Chrome-trace JSON that is not an Ascend timeline (those are claimed by their own format)."""
    text = head.lstrip()[:65536]
    if text[:1] == b"{":
        return b'"traceEvents"' in text or b'"schemaVersion"' in text or b'"distributedInfo"' in text
    if text[:1] == b"[":
        return b'"ph"' in text and b"Ascend" not in text and b'"CANN"' not in text
    return False


def _decode(data: bytes, path: Path) -> tuple[_Trace, Counter[str], int]:
    """Decode the document; returns (trace, rejected-by-reason, events read)."""
    stripped = data.lstrip()
    is_list = stripped[:1] == b"["
    try:
        if is_list:
            trace = _Trace(traceEvents=_list_decoder.decode(data))
        else:
            trace = _trace_decoder.decode(data)
        events = trace.traceEvents
        if events is None:
            raise CorruptTrace("JSON object has no 'traceEvents' list", path=path)
        return trace, Counter(), len(events)
    except msgspec.ValidationError:
        pass  # some event has the wrong shape: go through the lenient path below
    except msgspec.DecodeError as err:
        raise CorruptTrace(f"invalid JSON ({_short(err)})", path=path) from None
    doc = msgspec.json.decode(data)
    if is_list:
        raw_events, header = doc, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        raw_events, header = doc["traceEvents"], doc
    else:
        raise CorruptTrace("JSON object has no 'traceEvents' list", path=path)
    rejected: Counter[str] = Counter()
    good: list[_Event] = []
    for raw in raw_events:
        if not isinstance(raw, dict):
            rejected["not_an_object"] += 1
            continue
        try:
            good.append(msgspec.convert(raw, _Event))
        except msgspec.ValidationError:
            rejected["malformed_args"] += 1
    trace = _Trace(
        traceEvents=good,
        distributedInfo=header.get("distributedInfo"),
        displayTimeUnit=header.get("displayTimeUnit"),
        baseTimeNanoseconds=header.get("baseTimeNanoseconds"),
        deviceProperties=header.get("deviceProperties"),
    )
    return trace, rejected, len(raw_events)


def _short(err: Exception) -> str:
    msg = str(err)
    return "input is truncated" if "truncated" in msg.lower() else msg


def read_kineto(path: str | Path, options: IngestOptions | None = None) -> IngestResult:
    """Read one Kineto trace file into canonical tables (rank column = -1; the driver fills it)."""
    with col.gc_paused():
        return _read_kineto(Path(path), options or IngestOptions())


def _read_kineto(path: Path, options: IngestOptions) -> IngestResult:
    path = Path(path)
    data = read_source_bytes(path, max_bytes=options.max_decompressed_bytes)
    if not data.strip():
        raise CorruptTrace("file is empty", path=path)
    trace, rejected, n_read = _decode(data, path)
    del data
    evs: list[_Event] = trace.traceEvents or []
    if n_read == 0:
        raise CorruptTrace("no events ('traceEvents' is empty)", path=path)
    base_ns = trace.baseTimeNanoseconds if isinstance(trace.baseTimeNanoseconds, int) else 0

    n = len(evs)
    ph = col.dict_strings([e.ph for e in evs]).cast(pa.string())
    pids_raw = [e.pid for e in evs]
    tids_raw = [e.tid for e in evs]
    ts = col.to_ns([e.ts for e in evs])
    if base_ns:
        ts = pc.add(ts, base_ns)
    eid = np.arange(n, dtype=np.int64)

    is_span = pc.is_in(ph, pa.array(SPAN_PHASES))
    is_end = pc.equal(ph, "E")
    is_flow = pc.is_in(ph, pa.array(FLOW_PHASES))
    is_meta = pc.equal(ph, "M")
    is_other = pc.invert(pc.or_kleene(pc.or_kleene(is_span, is_end), pc.or_kleene(is_flow, is_meta)))
    is_other = pc.fill_null(is_other, True)

    # phases we do not keep
    if pc.any(is_other).as_py():
        for p, c in Counter(pc.filter(ph, is_other).to_pylist()).items():
            rejected["missing_phase" if p is None else f"unsupported_phase:{p}"] += c

    pid_ids, pid_table = col.id_map(pids_raw)
    tid_ids, tid_table = col.id_map(tids_raw)

    # ---- metadata → streams table
    streams, gpu_pids = _streams_from_metadata(evs, pc.filter(pa.array(eid), pc.fill_null(is_meta, False)),
                                               pid_table, tid_table)

    kept: Counter[str] = Counter()
    kept["metadata"] = int(pc.sum(pc.fill_null(is_meta, False)).as_py() or 0)

    # ---- flows
    flow_idx = np.flatnonzero(pc.fill_null(is_flow, False).to_numpy(zero_copy_only=False))
    flows, flow_rej = _flows(evs, flow_idx, ts, pid_ids, tid_ids)
    rejected.update(flow_rej)
    kept["flows"] = flows.num_rows

    # ---- spans (X, B/E matched, instants)
    span_mask = pc.fill_null(is_span, False).to_numpy(zero_copy_only=False)
    end_mask = pc.fill_null(is_end, False).to_numpy(zero_copy_only=False)
    dur = pa.nulls(n, pa.int64())
    if span_mask.any():
        dur = col.to_ns([e.dur for e in evs])
    ph_np = np.asarray(ph.to_pylist(), dtype=object) if (end_mask.any() or pc.any(pc.equal(ph, "B")).as_py()) \
        else None
    dur_np = dur.to_numpy(zero_copy_only=False).astype("float64")  # NaN where null
    instants = pc.fill_null(pc.is_in(ph, pa.array(["i", "I", "R"])), False).to_numpy(zero_copy_only=False)
    dur_np[instants] = 0.0
    merged_ends = 0
    if ph_np is not None:
        merged_ends, be_rej = _match_begin_end(ph_np, pid_ids, tid_ids, ts, dur_np, span_mask)
        rejected.update(be_rej)
        rejected["unmatched_end"] += int(end_mask.sum()) - merged_ends
    ts_np = ts.to_numpy(zero_copy_only=False).astype("float64")
    names = col.dict_strings([e.name for e in evs])
    name_ok = pc.is_valid(names).to_numpy(zero_copy_only=False)
    pid_none = (pid_ids == pid_table[None]) if None in pid_table else np.zeros(n, bool)
    tid_none = (tid_ids == tid_table[None]) if None in tid_table else np.zeros(n, bool)
    reasons = [
        ("missing_name", ~name_ok),
        ("missing_pid_or_tid", pid_none | tid_none),
        ("bad_ts", np.isnan(ts_np)),
        ("bad_dur", np.isnan(dur_np)),
        ("negative_dur", dur_np < 0),
    ]
    good = span_mask.copy()
    for reason, bad in reasons:
        hit = good & bad
        if hit.any():
            rejected[reason] += int(hit.sum())
            good &= ~hit
    idx = np.flatnonzero(good)
    kept["events"] = len(idx) + merged_ends

    cats = col.dict_strings([e.cat for e in evs])
    take = pa.array(idx)
    ev_cat_dict = pc.take(cats, take)
    ev_cat = ev_cat_dict.cast(pa.string())
    ev_pid = pid_ids[idx]
    is_device = pc.or_(
        pc.fill_null(pc.is_in(ev_cat, pa.array(sorted(DEVICE_CATS))), False),
        pc.is_in(pa.array(ev_pid, pa.int32()), pa.array(sorted(gpu_pids), pa.int32())),
    )
    kind = _kind_from_category(ev_cat, is_device)
    sel = evs if len(idx) == n else [evs[i] for i in idx]
    args_list = [e.args for e in sel]
    corr = col.ints([a.correlation if a is not None else None for a in args_list])
    events = pa.table(
        {
            "rank": pa.array(np.full(len(idx), -1, np.int32)),
            "pid": pa.array(ev_pid, pa.int32()),
            "stream": pa.array(tid_ids[idx], pa.int32()),
            "is_device": is_device,
            "kind": dictionary(kind),
            "name": pc.take(names, take),
            "cat": ev_cat_dict,
            "ts_ns": pc.take(ts, take),
            "dur_ns": pa.array(dur_np[idx].astype(np.int64)),
            "step": pa.nulls(len(idx), pa.int32()),
            "layer": pa.nulls(len(idx), pa.int16()),
            "micro_batch": pa.nulls(len(idx), pa.int8()),
            "corr": corr,
            "eid": pa.array(idx.astype(np.int64)),
        },
        schema=EVENTS_SCHEMA,
    )
    args = _args_table(args_list, idx, ev_cat)
    streams = _complete_streams(streams, events, pid_table, tid_table)
    acc = Accounting(read=n_read, kept=kept, rejected=rejected).check(str(path))
    return IngestResult(
        path=str(path),
        format=FORMAT_NAME,
        events=events,
        args=args,
        flows=flows,
        streams=streams,
        accounting=acc,
        rank_info=_rank_info(trace, events),
        notes={
            "display_time_unit": trace.displayTimeUnit if isinstance(trace.displayTimeUnit, str) else None,
            "base_time_ns": base_ns or None,
        },
    )


def _none_mask(values: list[Any]) -> pa.Array:
    return pa.array([v is None for v in values], pa.bool_())


def _kind_from_category(cat: pa.Array, is_device: pa.Array) -> pa.Array:
    keys = pa.array(list(CATEGORY_KIND))
    vals = pa.array([str(v) for v in CATEGORY_KIND.values()])
    pos = pc.index_in(cat, keys)
    mapped = pc.take(vals, pos)
    fallback = pc.if_else(is_device, pa.scalar(str(Kind.OTHER)), pa.scalar(str(Kind.HOST)))
    return pc.coalesce(mapped, fallback)


def _match_begin_end(ph: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: pa.Array, dur: np.ndarray,
                     span_mask: np.ndarray) -> tuple[int, Counter[str]]:
    """Pair B with the next E on the same (pid, tid) stack; writes the B's duration into ``dur``.

    Unmatched B events are dropped from ``span_mask`` and rejected; returns (ends merged, rejections).
    """
    ts_list = ts.to_pylist()
    order = sorted(np.flatnonzero((ph == "B") | (ph == "E")), key=lambda i: (ts_list[i] is None, ts_list[i] or 0, i))
    stacks: dict[tuple[int, int], list[int]] = {}
    merged = 0
    rej: Counter[str] = Counter()
    for i in order:
        key = (int(pid[i]), int(tid[i]))
        if ph[i] == "B":
            stacks.setdefault(key, []).append(i)
        else:
            stack = stacks.get(key)
            if stack and ts_list[i] is not None and ts_list[stack[-1]] is not None:
                b = stack.pop()
                dur[b] = ts_list[i] - ts_list[b]
                merged += 1
    for stack in stacks.values():
        for b in stack:
            span_mask[b] = False
            rej["unmatched_begin"] += 1
    return merged, rej


def _flows(evs: list[_Event], idx: np.ndarray, ts: pa.Array, pid_ids: np.ndarray, tid_ids: np.ndarray
           ) -> tuple[pa.Table, Counter[str]]:
    rej: Counter[str] = Counter()
    take = pa.array(idx, pa.int64())
    f_ts = pc.take(ts, take)
    ids = [evs[i].id for i in idx]
    ok = np.array([v is not None for v in ids], dtype=bool) & pc.is_valid(f_ts).to_numpy(zero_copy_only=False)
    if (~ok).any():
        rej["bad_flow"] += int((~ok).sum())
    keep = idx[ok]
    sel = [evs[i] for i in keep]
    table = pa.table(
        {
            "rank": pa.array(np.full(len(keep), -1, np.int32)),
            "flow_id": pa.array([str(e.id) for e in sel], pa.string()),
            "phase": col.strings([e.ph for e in sel]),
            "cat": col.strings([e.cat for e in sel]),
            "name": col.strings([e.name for e in sel]),
            "pid": pa.array(pid_ids[keep], pa.int32()),
            "stream": pa.array(tid_ids[keep], pa.int32()),
            "ts_ns": pc.take(ts, pa.array(keep, pa.int64())),
        },
        schema=FLOWS_SCHEMA,
    )
    return table, rej


def _streams_from_metadata(evs: list[_Event], meta_idx: pa.Array, pid_table: dict, tid_table: dict
                           ) -> tuple[dict[tuple[int, int | None], dict[str, Any]], set[int]]:
    """Collect process/thread names and labels from ``M`` events; returns rows keyed by (pid, tid|None)."""
    rows: dict[tuple[int, int | None], dict[str, Any]] = {}
    gpu_pids: set[int] = set()
    for i in meta_idx.to_pylist():
        e = evs[i]
        if e.pid is None or e.args is None:
            continue
        pid = pid_table.get(e.pid)
        if pid is None:
            continue
        value = e.args.name if e.name in ("process_name", "thread_name") else e.args.labels
        if e.name == "process_name":
            rows.setdefault((pid, None), {})["process_name"] = _s(value)
        elif e.name == "process_labels":
            rows.setdefault((pid, None), {})["process_label"] = _s(value)
            if isinstance(value, str) and value.upper().startswith(("GPU", "NPU", "XPU")):
                gpu_pids.add(pid)
        elif e.name == "thread_name" and e.tid is not None and e.tid in tid_table:
            rows.setdefault((pid, tid_table[e.tid]), {})["thread_name"] = _s(value)
    return rows, gpu_pids


def _s(v: Any) -> str | None:
    return v if isinstance(v, str) else (None if v is None else str(v))


def _complete_streams(meta_rows: dict, events: pa.Table, pid_table: dict, tid_table: dict) -> pa.Table:
    """One row per (pid, stream) that has events or a thread name."""
    inv_pid = {v: k for k, v in pid_table.items()}
    inv_tid = {v: k for k, v in tid_table.items()}
    pairs = (
        events.group_by(["pid", "stream"]).aggregate([("is_device", "max")]).to_pylist() if events.num_rows else []
    )
    seen = {(r["pid"], r["stream"]): bool(r["is_device_max"]) for r in pairs}
    for (pid, tid) in meta_rows:
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
                "source_pid": _s(inv_pid.get(pid)),
                "source_tid": _s(inv_tid.get(stream)),
                "process_name": proc.get("process_name"),
                "process_label": proc.get("process_label"),
                "thread_name": thr.get("thread_name"),
            }
        )
    return pa.Table.from_pylist(out, schema=STREAMS_SCHEMA)


_encode = msgspec.json.Encoder().encode


def _raw_texts(raws: list[msgspec.Raw]) -> pa.Array:
    """Raw JSON spans → a string array without a Python object per value (empty span → null)."""
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    offsets = np.zeros(len(raws) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(raws)
    arr = pa.LargeStringArray.from_buffers(len(raws), pa.py_buffer(offsets), pa.py_buffer(data))
    arr = arr.cast(pa.string())
    if (lengths == 0).any():
        arr = pc.if_else(pa.array(lengths == 0), pa.scalar(None, pa.string()), arr)
    return arr


def _json_texts(values: list[Any]) -> pa.Array:
    """JSON text of each value (strings kept as they are), null for None; one C call per value."""
    if not values:
        return pa.array([], pa.string())
    encoded = list(map(_encode, values))
    arr = pa.array(encoded, pa.binary()).cast(pa.string())
    # strings are kept as written (not JSON-quoted); None stays null
    is_str = [isinstance(v, str) for v in values]
    if any(is_str):
        arr = pc.if_else(pa.array(is_str), pa.array([v if isinstance(v, str) else None for v in values],
                                                    pa.string()), arr)
    return pc.if_else(pc.equal(arr, "null"), pa.scalar(None, pa.string()), arr)


#: Categories whose events never carry collective or step/layer annotation args. (cpu_op can:
#: ``record_param_comms`` ops carry the collective metadata.)
_PLAIN_CATS = pa.array(["cuda_runtime", "cuda_driver", "Runtime", "python_function"])


def _args_table(args_list: list[_Args | None], idx: np.ndarray, cat: pa.Array) -> pa.Table:
    """Rows for events that carry collective metadata, step/layer annotation args, or input shapes.

    Two passes keep this cheap: shapes (common, on every cpu_op of a ``record_shapes`` trace) fill
    three columns; the rare rich rows (NCCL kernels, annotations) fill all of them.
    """
    maybe_rich = np.flatnonzero(~pc.fill_null(pc.is_in(cat, _PLAIN_CATS), False).to_numpy(zero_copy_only=False))
    rich = [
        j
        for j in maybe_rich.tolist()
        if (a := args_list[j]) is not None
        and (
            a.collective is not None
            or a.in_nelems is not None
            or a.pg_ranks is not None
            or a.step is not None
            or a.layer is not None
            or a.seq_lens is not None
            or a.dp_group is not None
            or a.micro_batch is not None
        )
    ]
    rich_set = set(rich)
    dims = [j for j, a in enumerate(args_list) if a is not None and a.input_dims and j not in rich_set]
    return pa.concat_tables([_rich_args(args_list, rich, idx), _dims_args(args_list, dims, idx)]).sort_by("eid")


def _dims_args(args_list: list[_Args | None], rows: list[int], idx: np.ndarray) -> pa.Table:
    sel: list[_Args] = [args_list[j] for j in rows]  # type: ignore[misc]
    n = len(rows)
    cols: dict[str, pa.Array] = {
        f.name: pa.nulls(n, f.type) for f in ARGS_SCHEMA
    }
    cols["rank"] = pa.array(np.full(n, -1, np.int32))
    cols["eid"] = pa.array(idx[rows].astype(np.int64) if rows else np.zeros(0, np.int64))
    cols["external_id"] = col.ints([a.external_id for a in sel])
    cols["input_dims"] = _raw_texts([a.input_dims for a in sel])
    cols["input_type"] = _raw_texts([a.input_type for a in sel])
    return pa.table(cols, schema=ARGS_SCHEMA)


def _rich_args(args_list: list[_Args | None], rows: list[int], idx: np.ndarray) -> pa.Table:
    sel: list[_Args] = [args_list[j] for j in rows]  # type: ignore[misc]
    extra: list[str | None] = []
    for a in sel:
        d = {k: getattr(a, k) for k in _EXTRA_KEYS if getattr(a, k) is not None}
        extra.append(msgspec.json.encode(d).decode() if d else None)
    return pa.table(
        {
            "rank": pa.array(np.full(len(rows), -1, np.int32)),
            "eid": pa.array(idx[rows].astype(np.int64) if rows else np.zeros(0, np.int64)),
            "external_id": col.ints([a.external_id for a in sel]),
            "collective": col.strings([a.collective for a in sel]),
            "in_nelems": col.ints([a.in_nelems for a in sel]),
            "out_nelems": col.ints([a.out_nelems for a in sel]),
            "group_size": col.ints([a.group_size for a in sel], pa.int32()),
            "dtype": col.strings([a.dtype for a in sel]),
            "pg_name": col.strings([_s(a.pg_name) for a in sel]),
            "pg_desc": col.strings([_s(a.pg_desc) for a in sel]),
            "pg_ranks": _json_texts([a.pg_ranks for a in sel]),
            "in_split": _json_texts([a.in_split for a in sel]),
            "out_split": _json_texts([a.out_split for a in sel]),
            "input_dims": _raw_texts([a.input_dims for a in sel]),
            "input_type": _raw_texts([a.input_type for a in sel]),
            "extra": pa.array(extra, pa.string()),
        },
        schema=ARGS_SCHEMA,
    )


def _rank_info(trace: _Trace, events: pa.Table) -> RankInfo:
    info = trace.distributedInfo if isinstance(trace.distributedInfo, dict) else {}
    rank = info.get("rank")
    world = info.get("world_size")
    ok = isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0
    return RankInfo(
        rank=rank if ok else None,
        source="distributedInfo" if ok else "unknown",
        world_size=world if isinstance(world, int) else None,
        device=_main_device(events),
    )


def _main_device(events: pa.Table) -> int | None:
    """The device id (GPU pid) that ran most device events."""
    dev = events.filter(pc.and_(events["is_device"], pc.greater_equal(events["pid"], 0)))
    if dev.num_rows == 0:
        return None
    counts = pc.value_counts(dev["pid"]).to_pylist()
    return int(max(counts, key=lambda c: c["counts"])["values"])


KINETO = register_format(
    Format(
        name=FORMAT_NAME,
        sniff=sniff,
        read=read_kineto,
        description="PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz)",
    )
)
