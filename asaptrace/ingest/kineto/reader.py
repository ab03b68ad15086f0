"""PyTorch profiler (Kineto) Chrome-trace JSON → canonical tables.

Accepts ``.json`` and ``.json.gz`` (gzip detected by content), a top-level object with
``traceEvents`` or a bare list of events; ``ts``/``dur`` as int, float or string µs (Chrome trace
times are µs whatever ``displayTimeUnit`` says — that key only sets the viewer's display unit and is
recorded in meta); ``baseTimeNanoseconds`` is added to every time when present (Kineto writes times
relative to it). Phases: complete ``X``; ``B``/``E`` pairs matched per (pid, tid); instants ``i``/``I``
/``R`` (dur 0); flows ``s``/``t``/``f`` (flows table); metadata ``M`` (streams table). Other phases
(counters ``C``, async ``b``/``e``/``n``, samples, objects) are counted as rejected with their phase
in the reason. Every event read is kept or rejected: ``read == kept + Σ rejected``.

Two decoders turn the bytes into the same per-event columns
(:class:`~asaptrace.ingest.kineto.decode.EventColumns`); everything after that — phase masks,
B/E matching, rejections, accounting, tables — is shared:

* the C scanner ``asaptrace.ingest.kineto._kscan`` (compiled by ``pip install``): one pass over the bytes
  into columnar buffers, no Python object per event. Times convert exactly from their decimal text
  (``1694128201435418.123`` µs → ``1694128201435418123`` ns, more than 3 decimals rounded half to
  even), also for JSON floats;
* msgspec (typed structs, ≈ 1 µs per event): the fallback when the extension is not built, and the
  path for files the strict C scanner declines — those are re-read by msgspec, so errors carry the
  same messages and odd-but-valid files read as before. JSON float times go through float64 here.

Set the environment variable ``ASAPTRACE_NO_CSCAN=1`` to force the msgspec path (to compare the two,
or to rule the extension out when chasing a problem).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.accounting import Accounting
from asaptrace.errors import CorruptTrace
from asaptrace.ingest import columns as col
from asaptrace.ingest.base import Format, IngestOptions, IngestResult, register_format
from asaptrace.ingest.kineto import c_scanner_enabled, cscan, pieces, prefetch
from asaptrace.ingest.kineto.args import args_table
from asaptrace.ingest.kineto.decode import EventColumns, Times, decode_python, first_char
from asaptrace.ingest.kineto.dictionary import dict_codes, dict_mask
from asaptrace.ingest.kineto.flows import flows
from asaptrace.ingest.kineto.merge import merge
from asaptrace.ingest.kineto.rank import device_model, rank_info
from asaptrace.ingest.kineto.streams import complete_streams, streams_from_metadata
from asaptrace.ingest.source import file_sha256, read_source_bytes
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


def sniff(path: Path, head: bytes) -> bool:
    """A Chrome-trace JSON that is not an Ascend timeline (those are claimed by their own format)."""
    text = head.lstrip()[:65536]
    if text[:1] == b"{":
        return b'"traceEvents"' in text or b'"schemaVersion"' in text or b'"distributedInfo"' in text
    if text[:1] == b"[":
        return b'"ph"' in text and b"Ascend" not in text and b'"CANN"' not in text
    return False


def read_kineto(path: str | Path, options: IngestOptions | None = None) -> IngestResult:
    """Read one Kineto trace file into canonical tables (rank column = -1; the driver fills it)."""
    with col.gc_paused():
        return _read_kineto(Path(path), options or IngestOptions())


def _read_kineto(path: Path, options: IngestOptions) -> IngestResult:
    if not _reads_in_pieces(path, options):
        return _read_whole(path, options)
    # a big file: never held whole, scanned on both cores, hashed as it is read (the driver does
    # not hash it: hashes_while_reading)
    sha256 = hashlib.sha256()
    if options.chunk_dir is not None:  # its plain host rows written in chunks as they come
        from asaptrace.ingest.kineto.split import read_split

        try:
            return replace(
                read_split(path, options, Path(options.chunk_dir), sha256), sha256=sha256.hexdigest()
            )
        except pieces.NotInPieces:
            sha256 = hashlib.sha256()
    try:
        parts = pieces.read_in_pieces(path, max_bytes=options.max_decompressed_bytes, sha256=sha256)
    except pieces.NotInPieces:  # read whole, which says what is wrong with it, if anything
        return replace(_read_whole(path, options), sha256=file_sha256(path))
    cols = merge(parts)
    del parts  # the pieces' own columns: the joined ones replace them
    return replace(_tables(cols, path), sha256=sha256.hexdigest())


def _reads_in_pieces(path: Path, options: IngestOptions) -> bool:
    """A big file not read ahead whole already (:func:`~asaptrace.ingest.kineto.pieces.in_pieces`):
    the reader hashes it as it reads it (the format's ``hashes_while_reading``)."""
    return prefetch.digest(path) is None and pieces.in_pieces(path, options)


def _read_whole(path: Path, options: IngestOptions) -> IngestResult:
    ahead = prefetch.take(path)  # read and scanned while the process was importing
    if ahead is not None and ahead.data is not None and len(ahead.data) <= options.max_decompressed_bytes:
        data = ahead.data
    else:
        ahead = None
        data = read_source_bytes(path, max_bytes=options.max_decompressed_bytes)
    if not first_char(data):
        raise CorruptTrace("file is empty", path=path)
    cols = decode_columns(data, path, ahead)
    del data, ahead  # the C path keeps no reference to the input (msgspec's Raw shapes do): freed here
    return _tables(cols, path)


def decode_columns(data: bytes, path: Path, ahead: prefetch.Prefetched | None = None) -> EventColumns:
    """The file's per-event columns, from the C scanner when it is enabled and accepts the file
    (``ahead``: its scan of ``data``, made while the process was importing)."""
    if c_scanner_enabled() and not (ahead is not None and ahead.refused):
        cols = cscan.decode_c(data, path, ahead.scan if ahead is not None else None)
        if cols is not None:
            return cols
    return decode_python(data, path)


class _Phases:
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
    """Events of the file kept out of its tables, each read and kept (a big file's host rows,
    written in chunks: :mod:`asaptrace.ingest.kineto.split`): how many, and their distinct
    (pid, stream, is_device) for the streams table."""

    rows: int
    streams: pa.Table


def base_time_ns(header: dict[str, Any]) -> int:
    """The file's ``baseTimeNanoseconds`` (0 when absent or not a usable int)."""
    base = header.get("baseTimeNanoseconds")
    ok = isinstance(base, int) and not isinstance(base, bool) and col.INT64_MIN <= base <= col.INT64_MAX
    return base if ok else 0


def _tables(
    c: EventColumns, path: Path, *, eids: np.ndarray | None = None, outside: Outside | None = None
) -> IngestResult:
    """The shared downstream: per-event columns → canonical tables with balanced accounting.
    ``eids``: each row's event id when the columns hold only some of the file's rows (its place
    in the file; default: the row's own place); ``outside``: the rows kept out of the tables."""
    if c.n_read == 0:
        raise CorruptTrace("no events ('traceEvents' is empty)", path=path)
    rejected: Counter[str] = Counter(c.rejected)
    base_ns = base_time_ns(c.header)
    ts = _shifted(c.ts, base_ns)
    ph = _Phases(c.ph)
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
    kept["flows"] = flow_table.num_rows

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

    take = pa.array(idx)
    ev_cat = pc.take(c.cat, take)
    ev_pid = c.pid.ids[idx]
    is_device = dict_mask(ev_cat, DEVICE_CATS) | np.isin(ev_pid, np.array(sorted(gpu_pids), np.int32))
    events = pa.table(
        {
            "rank": pa.array(np.full(len(idx), -1, np.int32)),
            "pid": pa.array(ev_pid, pa.int32()),
            "stream": pa.array(c.tid.ids[idx], pa.int32()),
            "is_device": pa.array(is_device),
            "kind": _kind_from_category(ev_cat, is_device),
            "name": pc.take(c.name, take),
            "cat": ev_cat,
            "ts_ns": pa.array(ts_np[idx]),
            "dur_ns": pa.array(dur_np[idx].astype(np.int64)),
            "step": pa.nulls(len(idx), pa.int32()),
            "layer": pa.nulls(len(idx), pa.int16()),
            "micro_batch": pa.nulls(len(idx), pa.int8()),
            "corr": c.corr(idx),
            "eid": pa.array((idx if eids is None else eids[idx]).astype(np.int64)),
        },
        schema=EVENTS_SCHEMA,
    )
    arg_rows = args_table(c, idx, ev_cat)
    if eids is not None:
        at = arg_rows.schema.get_field_index("eid")
        arg_rows = arg_rows.set_column(at, "eid", pa.array(eids[arg_rows.column(at).to_numpy()]))
    used = events.select(["pid", "stream", "is_device"])
    if outside is not None:
        used = pa.concat_tables([used, outside.streams.cast(used.schema)])
    streams = complete_streams(meta_streams, used, c.pid.table, c.tid.table)
    read = c.n_read + (outside.rows if outside else 0)
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


def _shifted(ts: Times, base_ns: int) -> Times:
    """ts + baseTimeNanoseconds; a sum beyond int64 is an unusable time, never a wrap."""
    if not base_ns:
        return ts
    v = ts.values
    fits = v <= col.INT64_MAX - base_ns if base_ns > 0 else v >= col.INT64_MIN - base_ns
    return Times(np.where(fits, v, 0) + np.int64(base_ns), ts.valid & fits)


_KINDS = sorted({str(k) for k in CATEGORY_KIND.values()} | {str(Kind.OTHER), str(Kind.HOST)})
_KIND_CODE = {k: i for i, k in enumerate(_KINDS)}


def _kind_from_category(cat: pa.DictionaryArray, is_device: np.ndarray) -> pa.DictionaryArray:
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


KINETO = register_format(
    Format(
        name=FORMAT_NAME,
        priority=10,
        sniff=sniff,
        suffixes=(".json", ".json.gz", ".gz"),
        read=read_kineto,
        hashes_while_reading=_reads_in_pieces,
        reads_in_chunks=_reads_in_pieces,
        description="PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz)",
    )
)
