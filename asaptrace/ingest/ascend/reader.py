"""Ascend (torch_npu / msprof) profiler output → canonical tables.

One rank is one torch_npu output folder ``<name>_ascend_pt/`` (or its ``ASCEND_PROFILER_OUTPUT/``,
or a bare folder holding ``trace_view.json``). Its timeline ``trace_view.json`` is a Chrome-trace
*list* with ``ts`` as decimal strings in µs; it is decoded by the Kineto reader (same phases, same
exact string → ns conversion, same event accounting) and then re-read with Ascend's process layout:

=====================  ==========  ======================  =====================================
process (``M`` name)   is_device   kind before taxonomy    ``cat`` when the source has none
=====================  ==========  ======================  =====================================
``Ascend Hardware``    yes         ``compute``             ``ascend_hardware`` (tid = stream)
``Communication`` /    yes         ``collective`` (op      ``hccl_op`` / ``hccl_task``
``HCCL``                           threads ``…Communica-
                                   tion``), ``other``
                                   (``Plane`` task threads:
                                   Notify_Wait, Memcpy,
                                   RDMASend inside an op)
``Overlap Analysis``   no          ``annotation``          ``overlap_analysis``
``CANN``               no          ``host``                ``cann``
``Python`` and others  as Kineto   as Kineto (``cpu_op`` → ``host``, ``user_annotation`` → ``annotation``)
=====================  ==========  ======================  =====================================

``Overlap Analysis`` slices (Computing / Communication / Communication(Not Overlapped) / Free) are
the profiler's own summary of the device: kept, but as host-side annotations so that no analysis
counts them as device work twice. HCCL inner tasks are device activity nested inside their op, so
they get ``other`` rather than ``collective``: an op is matched across ranks once, not once per task.
Launch links come from the flow arrows (see :mod:`.links`).

Companions (read by :mod:`.companions`, merged by :mod:`.merge`):
``kernel_details.csv`` adds the kernels the timeline lacks (rows matching a timeline task by name
and start within 1 µs only add their input shapes and op type; rows more than 1 s outside the
timeline's span — another run's CSV — are rejected as ``kernel_details_outside_timeline``); ``communication.json`` adds each HCCL op's Elapse / Transit /
Wait / Synchronization / Idle times (ns) to the ``args`` table's ``extra`` JSON of the matching op
(keys ``hccl_*``), or becomes the op itself when the timeline lacks it. Every companion row read is
counted in the accounting. A folder with no ``trace_view.json`` is read from its
``kernel_details.csv`` alone.
"""

from __future__ import annotations

import gzip
import mmap
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.accounting import Accounting
from asaptrace.errors import CorruptTrace
from asaptrace.ingest.ascend.companions import (
    KERNEL_DETAILS,
    OUTPUT_DIR,
    TIMELINE_NAMES,
    find_companions,
    folder_facts,
    rank_root,
)
from asaptrace.ingest.ascend.links import launch_corr
from asaptrace.ingest.ascend.merge import Build, add_communication, add_kernel_details
from asaptrace.ingest.base import Format, IngestOptions, IngestResult, RankInfo, register_format
from asaptrace.ingest.kineto.reader import read_kineto
from asaptrace.ingest.source import GZIP_MAGIC
from asaptrace.schema import ARGS_SCHEMA, EVENTS_SCHEMA, FLOWS_SCHEMA, STREAMS_SCHEMA, Kind

FORMAT_NAME = "ascend"

DEVICE_PROCESSES = frozenset({"Ascend Hardware"})
HCCL_PROCESSES = frozenset({"Communication", "HCCL"})
OVERLAP_PROCESSES = frozenset({"Overlap Analysis"})
CANN_PROCESSES = frozenset({"CANN"})
_HCCL_OP_PREFIXES = ("hcom_", "hccl", "Hccl", "HCCL")

#: role of a (process, thread) → (is_device, kind, cat label used when the source has no cat)
_ROLES: dict[str, tuple[bool, str, str]] = {
    "device": (True, Kind.COMPUTE.value, "ascend_hardware"),
    "hccl_op": (True, Kind.COLLECTIVE.value, "hccl_op"),
    "hccl_task": (True, Kind.OTHER.value, "hccl_task"),
    "overlap": (False, Kind.ANNOTATION.value, "overlap_analysis"),
    "cann": (False, Kind.HOST.value, "cann"),
}

#: Process names only torch_npu / msprof write; seeing one in a JSON list marks an Ascend timeline.
_MARKERS = (b'"Ascend Hardware"', b'"CANN"', b'"Overlap Analysis"', b'"HCCL"')

#: Files of an Ascend rank folder that are companions, never sources of their own.
COMPANION_NAMES = frozenset(
    {
        "communication.json",
        "communication_matrix.json",
        "profiler_metadata.json",
        "kernel_details.csv",
        "step_trace_time.csv",
        "operator_details.csv",
        "op_statistic.csv",
        "analysis.db",
    }
)


# ---------------------------------------------------------------- detection and sources


def sniff(path: Path, head: bytes) -> bool:
    """A Chrome-trace JSON list naming Ascend processes, or a kernel_details-style CSV.

    torch_npu writes its process names after the Python events, often beyond the first 64 KiB,
    so when the head shows a trace list without them the file's ``process_name`` entries are
    searched (a memory-mapped ``find``: fast even on gigabyte files).
    """
    text = head.lstrip()
    if text[:1] == b"[":
        if b'"ph"' not in text:
            return False
        return any(m in text for m in _MARKERS) or _has_ascend_process(path)
    return _looks_like_kernel_details(text)


def _has_ascend_process(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            if f.read(2) == GZIP_MAGIC:
                return _scan_gzip(path)
            f.seek(0)
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _scan(mm, len(mm))
    except (OSError, ValueError, EOFError, zlib.error):
        return False


def _scan(buf: Any, end: int) -> bool:
    pos = buf.find(b"process_name", 0, end)
    while pos >= 0:
        window = bytes(buf[pos : pos + 200])
        if any(m in window for m in _MARKERS):
            return True
        pos = buf.find(b"process_name", pos + 12, end)
    return False


def _scan_gzip(path: Path, chunk: int = 16 * 1024 * 1024) -> bool:
    tail = b""
    with gzip.open(path, "rb") as f:
        while block := f.read(chunk):
            data = tail + block
            if _scan(data, len(data)):
                return True
            tail = data[-256:]
    return False


def _looks_like_kernel_details(text: bytes) -> bool:
    first = text.split(b"\n", 1)[0].decode("utf-8", "replace").lstrip("\ufeff")
    cols = {c.strip() for c in first.split(",")}
    return (
        bool(cols & {"Name", "Op Name"})
        and bool(cols & {"Start Time(us)", "Task Start Time(us)"})
        and bool(cols & {"Duration(us)", "Task Duration(us)"})
    )


def ascend_sources(files: Iterable[str | Path]) -> list[Path]:
    """Map discovered files to one source per Ascend rank; other files pass through unchanged.

    Every file inside a ``…_ascend_pt/`` (or ``ASCEND_PROFILER_OUTPUT/``) folder is replaced by that
    rank's timeline: ``ASCEND_PROFILER_OUTPUT/trace_view.json``, else its ``kernel_details.csv``, else
    msprof's ``PROF_*/mindstudio_profiler_output/msprof_*.json``; a rank folder with none of them is
    a :class:`CorruptTrace`. Outside such folders, companion files (``communication.json``,
    ``profiler_info_*.json``, …) lying beside a ``trace_view.json`` are folded into it. Order is kept,
    duplicates dropped.
    """
    out: dict[Path, None] = {}
    timelines: dict[Path, Path] = {}
    for raw in files:
        f = Path(raw)
        root = rank_root(f)
        if root is not None:
            if root not in timelines:
                timelines[root] = rank_timeline(root)
            out[timelines[root]] = None
        elif _is_companion(f) and (beside := _timeline_in(f.parent)) is not None:
            out[beside] = None
        else:
            out[f] = None
    return list(out)


def rank_timeline(root: Path) -> Path:
    """The file that stands for the rank folder ``root`` (see :func:`ascend_sources`)."""
    dirs = [root / OUTPUT_DIR, root] if root.name != OUTPUT_DIR else [root]
    for d in dirs:
        if (t := _timeline_in(d)) is not None:
            return t
    for d in dirs:
        if (d / KERNEL_DETAILS).is_file():
            return d / KERNEL_DETAILS
    msprof = sorted(root.glob("PROF_*/mindstudio_profiler_output/msprof_*.json"))
    if msprof:
        return msprof[0]
    raise CorruptTrace(
        "Ascend profiler folder has no ASCEND_PROFILER_OUTPUT/trace_view.json, kernel_details.csv or "
        "msprof_*.json (was the profile parsed? run torch_npu's offline analyse on it; a db-only export "
        "needs export_type=text)",
        path=root,
    )


def _timeline_in(d: Path) -> Path | None:
    for name in TIMELINE_NAMES:
        if (d / name).is_file():
            return d / name
    return None


def _is_companion(f: Path) -> bool:
    n = f.name
    return (
        n in COMPANION_NAMES
        or (n.startswith("profiler_info") and n.endswith(".json"))
        or (n.startswith("ascend_pytorch_profiler") and n.endswith(".db"))
    )


# ---------------------------------------------------------------- reading


def read_ascend(path: str | Path, options: IngestOptions | None = None) -> IngestResult:
    """Read one Ascend rank (its timeline plus companions) into canonical tables (rank = -1)."""
    options = options or IngestOptions()
    path = Path(path)
    comp = find_companions(path)
    csv_only = path.suffix.lower() == ".csv"
    if csv_only:
        base_events, base_args, base_flows, base_streams = (
            s.empty_table() for s in (EVENTS_SCHEMA, ARGS_SCHEMA, FLOWS_SCHEMA, STREAMS_SCHEMA)
        )
        acc = Accounting()
    else:
        # all of its rows in the tables: the Ascend layer reads every one of them
        base = read_kineto(path, replace(options, chunk_dir=None))
        base_events, base_args, base_flows, base_streams = base.events, base.args, base.flows, base.streams
        acc = Accounting(
            read=base.accounting.read,
            kept=Counter(base.accounting.kept),
            rejected=Counter(base.accounting.rejected),
        )
    events, streams, roles = _classify(base_events, base_streams)
    events = events.set_column(events.schema.get_field_index("corr"), "corr", launch_corr(events, base_flows))
    b = Build(
        events=events,
        args=base_args,
        streams=streams,
        next_eid=max(acc.read, int(pc.max(events["eid"]).as_py() or 0) + 1 if events.num_rows else 0),
    )
    notes: dict[str, Any] = {"companions": comp.paths(), "warnings": []}
    kd_path = path if csv_only else comp.kernel_details
    kd_devices: list[int] = []
    if kd_path is not None:
        kd_devices = add_kernel_details(b, kd_path, acc, notes, roles, against_timeline=not csv_only)
    if comp.communication is not None:
        add_communication(b, comp.communication, acc, notes, roles)
    events, args, streams = b.finish()
    acc.check(str(path))
    facts = folder_facts(comp)
    device = (
        facts.device
        if facts.device is not None
        else (max(set(kd_devices), key=kd_devices.count) if kd_devices else None)
    )
    info = RankInfo(
        rank=facts.rank,
        source=facts.source,
        world_size=facts.world_size,
        ep=facts.ep,
        host=facts.host,
        device=device,
    )
    if not notes["warnings"]:
        del notes["warnings"]
    return IngestResult(
        path=str(path),
        format=FORMAT_NAME,
        events=events,
        args=args,
        flows=base_flows,
        streams=streams,
        accounting=acc,
        rank_info=info,
        notes=notes,
    )


def _classify(events: pa.Table, streams: pa.Table) -> tuple[pa.Table, pa.Table, dict[tuple[int, int], str]]:
    """Apply Ascend's process layout to is_device / kind / cat; returns the (pid, stream) → role map.

    Roles are decided once per distinct (pid, stream) and spread to the events as integer codes, so
    the per-event work is numpy / Arrow only.
    """
    proc: dict[int, str] = {}
    thread: dict[tuple[int, int], str] = {}
    for r in streams.select(["pid", "stream", "process_name", "thread_name"]).to_pylist():
        if r["process_name"]:
            proc[r["pid"]] = r["process_name"]
        if r["thread_name"]:
            thread[(r["pid"], r["stream"])] = r["thread_name"]
    roles: dict[tuple[int, int], str] = {}
    pairs = {(r["pid"], r["stream"]) for r in streams.select(["pid", "stream"]).to_pylist()}
    inv = np.zeros(0, dtype=np.intp)
    uniq_pairs: list[tuple[int, int]] = []
    if events.num_rows:
        pid = events["pid"].to_numpy()
        stream = events["stream"].to_numpy()
        key = (pid.astype(np.int64) << 32) | (stream.astype(np.int64) & 0xFFFFFFFF)
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        # first-appearance order, so the set (and the roles dict) iterate as if built event by event
        order = np.argsort(first, kind="stable")
        seen = list(zip(pid[first[order]].tolist(), stream[first[order]].tolist(), strict=True))
        pairs |= set(seen)
        uniq_pairs = list(zip(pid[first].tolist(), stream[first].tolist(), strict=True))
    for p, s in pairs:
        role = _role(proc.get(p), thread.get((p, s)))
        if role is not None:
            roles[(p, s)] = role
    if events.num_rows == 0 or not roles:
        return events, _stream_devices(streams, roles), roles
    codes = {name: c for c, name in enumerate(_ROLE_CODES)}
    role = np.array([codes[roles.get(k, "")] for k in uniq_pairs], dtype=np.int8)[inv.reshape(-1)]
    unsure = role == codes["hccl?"]
    if unsure.any():
        names = events["name"].combine_chunks().cast(pa.string())
        is_op = np.zeros(events.num_rows, dtype=bool)
        for prefix in _HCCL_OP_PREFIXES:
            is_op |= pc.fill_null(pc.starts_with(names, prefix), False).to_numpy(zero_copy_only=False)
        role[unsure & is_op] = codes["hccl_op"]
        role[unsure & ~is_op] = codes["hccl_task"]
    no_cat = events["cat"].is_null().to_numpy(zero_copy_only=False)
    is_dev = events["is_device"].to_numpy(zero_copy_only=False).copy()
    kind_sets: list[tuple[np.ndarray, str]] = []
    cat_sets: list[tuple[np.ndarray, str]] = []
    for name, (dev, knd, label) in _ROLES.items():
        m = role == codes[name]
        if not m.any():
            continue
        is_dev[m] = dev
        kind_sets.append((m if name == "overlap" else (m & no_cat), knd))
        cat_sets.append((m & no_cat, label))
    out = events
    for col, arr in (
        ("is_device", pa.array(is_dev, pa.bool_())),
        ("kind", _relabel(events["kind"], kind_sets)),
        ("cat", _relabel(events["cat"], cat_sets)),
    ):
        out = out.set_column(out.schema.get_field_index(col), col, arr)
    return out, _stream_devices(streams, roles), roles


def _relabel(column: pa.ChunkedArray, sets: list[tuple[np.ndarray, str]]) -> pa.Array:
    """``column`` (strings) with the rows of each mask set to its label, dictionary-encoded exactly
    as :func:`dictionary` encodes the decoded strings (values in order of first use).

    Works on the dictionary indices, so no per-row string is built or compared.
    """
    arr = column.combine_chunks()
    if not pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_encode()
    values = [*arr.dictionary.to_pylist(), *(label for _, label in sets)]
    idx = pc.fill_null(arr.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    base = len(values) - len(sets)
    for r, (mask, _) in enumerate(sets):
        idx[mask] = base + r
    # one id per distinct string (a dictionary may repeat a value, or hold a null)
    ids: dict[str, int] = {}
    value_id = np.array([-1 if v is None else ids.setdefault(v, len(ids)) for v in values] or [-1], np.int64)
    code = np.where(idx >= 0, value_id[np.maximum(idx, 0)], -1)
    present, first = np.unique(code, return_index=True)
    used = present[np.argsort(first, kind="stable")]
    used = used[used >= 0]  # -1 = null, which a dictionary does not hold
    new_code = np.full(len(ids) + 1, -1, dtype=np.int64)
    new_code[used] = np.arange(len(used))
    out = new_code[code]
    names = list(ids)
    return pa.DictionaryArray.from_arrays(
        pa.array(out.astype(np.int32), pa.int32(), mask=out < 0),
        pa.array([names[u] for u in used.tolist()], pa.string()),
    )


#: integer codes of the roles while they are spread over events ("" = no role, "hccl?" = by name)
_ROLE_CODES = ("", "hccl?", *_ROLES)


def _role(process: str | None, thread: str | None) -> str | None:
    if process in DEVICE_PROCESSES:
        return "device"
    if process in HCCL_PROCESSES:
        if thread and "communication" in thread.lower():
            return "hccl_op"
        return "hccl_task" if thread else "hccl?"
    if process in OVERLAP_PROCESSES:
        return "overlap"
    if process in CANN_PROCESSES:
        return "cann"
    return None


def _stream_devices(streams: pa.Table, roles: dict[tuple[int, int], str]) -> pa.Table:
    if streams.num_rows == 0 or not roles:
        return streams
    rows = streams.to_pylist()
    for r in rows:
        role = roles.get((r["pid"], r["stream"]))
        if role is not None and role != "hccl?":
            r["is_device"] = _ROLES[role][0]
        elif role == "hccl?":
            r["is_device"] = True
    return pa.Table.from_pylist(rows, schema=STREAMS_SCHEMA)


def source_name(path: Path) -> str | None:
    """What a rank map calls a file of a rank folder: the folder (every timeline is trace_view.json)."""
    root = rank_root(path)
    return None if root is None else root.name


ASCEND = register_format(
    Format(
        name=FORMAT_NAME,
        sniff=sniff,
        suffixes=(".json", ".json.gz"),
        file_names=("kernel_details.csv",),  # a rank folder whose timeline is missing
        read=read_ascend,
        # before Kineto: a trace_view.json is Chrome-trace JSON too, and Kineto's sniffer only sees
        # the first 64 KiB
        priority=20,
        group=ascend_sources,
        source_name=source_name,
        description="Ascend torch_npu / msprof output (trace_view.json + kernel_details.csv, communication.json)",
    )
)
