"""A store's device timeline as a Chrome / Perfetto trace, with the barrier waits drawn.

:func:`export_perfetto` turns the events, ranks and barrier instances of a measured **or replayed**
store (same canonical schema) into a Chrome trace-event document (``traceEvents``) that
ui.perfetto.dev and chrome://tracing open:

* one process per rank (``pid`` = rank), named ``rank 3 · fused · DP 0``, sorted by DP group then rank;
  one thread per device stream (``tid`` = stream), plus a **barrier wait** thread (:data:`WAIT_TID`);
* the device spans (``X`` events; annotations included), with kind, step, layer and micro-batch in
  ``args``; category ``kernel`` / ``gpu_memcpy`` / ``gpu_user_annotation`` by kind, so the Kineto
  reader reads them back as device events; kernels and copies carry Kineto's ``args.device``,
  ``args.stream`` and ``args.correlation``, which other Kineto readers (HTA) need to see a kernel;
* the host launches of those kernels (same correlation) with Kineto's ``ac2g`` arrows to them;
* every barrier wait (``wait_ns > 0``) as its own slice ``[arrival, release]`` on the wait thread
  (category ``barrier_wait``, which no reader takes for device work);
* flow arrows (``s``/``f``, one id per arrow) from the last-arriving rank's collective kernel at the
  release time to each waiter's wait slice;
* the critical path (a ``critical_path`` frame: rows of rank, kind, name, start_ns, end_ns in path
  order, :mod:`asaptrace.analyze.critical`) as slices on a **critical path** thread of each rank
  (:data:`CRITICAL_TID`, category ``critical_path``) joined by flow arrows from each piece to the
  next, across ranks where the path hops through a collective;
* counter tracks (``C`` events) from a ``counters`` frame — the hook for the replay's in-flight MoE
  items (columns ``rank, name, ts_ns, value``).

Times: ``ts``/``dur`` are µs with three decimals written exactly (``Decimal``, no float rounding),
relative to ``baseTimeNanoseconds`` (the first exported time). Kineto's convention is that readers
add that base back, so ``asaptrace ingest`` returns the same ns; viewers, which ignore the key,
show small times at full precision (a double holds epoch-µs to only ~0.25 µs).

:func:`split_by_rank` cuts a document into one per rank (with ``distributedInfo.rank``), the form
``asaptrace ingest`` and HTA read back rank by rank; :func:`encode_trace` lays a document out as Kineto
does; :func:`write_trace` writes ``.json`` or ``.json.gz`` atomically.
"""

from __future__ import annotations

import gzip
import itertools
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from asaptrace.schema import COMM_KINDS, Kind
from asaptrace.userfiles import write_atomic

#: Thread id of the barrier-wait track inside each rank's process (no stream uses it).
WAIT_TID = 999_999_000
#: Thread id of the critical-path track inside each rank's process, and its category.
CRITICAL_TID, CRITICAL_CAT = 999_999_001, "critical_path"
#: Category of the wait slices and of the flow arrows.
WAIT_CAT, FLOW_CAT = "barrier_wait", "barrier"
#: Category (and name) of Kineto's launch → kernel arrows.
LAUNCH_CAT = "ac2g"
#: Category written for a device span, by kind (what the Kineto reader takes for device work).
_DEVICE_CAT = {Kind.MEMCPY: "gpu_memcpy", Kind.ANNOTATION: "gpu_user_annotation"}
_ENCODER = msgspec.json.Encoder(decimal_format="number")
_THOUSAND = Decimal(1000)


def _us(ns: int) -> Decimal:
    """ns → µs as an exact decimal (three places)."""
    return Decimal(ns) / _THOUSAND


def _args(row: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: row[k] for k in keys if row.get(k) is not None}


def export_perfetto(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame,
    barrier_instances: pl.DataFrame,
    *,
    streams: pl.DataFrame | None = None,
    counters: pl.DataFrame | None = None,
    critical_path: pl.DataFrame | None = None,
    include_host: bool = False,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Chrome trace document of a store (see the module docstring for what it holds).

    ``include_host`` adds every host span; without it the host side holds only the launches of the
    exported kernels (what links them to the CPU in Kineto's model)."""
    frame = _spans(events)
    spans = _with_correlation(frame.filter(pl.col("is_device")))
    host = frame.filter(~pl.col("is_device"))
    if not include_host:
        host = host.join(spans.select("rank", "corr").drop_nulls(), on=["rank", "corr"], how="semi")
    spans = pl.concat([spans, host]).sort("rank", "ts_ns", "stream")
    rk = ranks.lazy().collect().sort("rank")
    waits = barrier_instances.filter(pl.col("wait_ns") > 0).sort("instance", "rank", nulls_last=True)
    times = [spans.get_column("ts_ns").min(), waits.get_column("arrival_ns").min() if waits.height else None]
    if counters is not None and counters.height:
        times.append(counters.get_column("ts_ns").min())
    base = min((int(t) for t in times if t is not None), default=0)  # type: ignore[call-overload]

    out: list[dict[str, Any]] = _process_metadata(rk, spans, streams)
    for r in spans.iter_rows(named=True):
        dev = r["is_device"]
        kernel = dev and r["kind"] != Kind.ANNOTATION
        cat = _DEVICE_CAT.get(r["kind"], "kernel") if dev else (r["source_cat"] or "cpu_op")
        args = _args(r, ("kind", "step", "layer", "micro_batch", "source_cat"))
        if kernel:  # Kineto's kernel / memcpy args: where it ran and what launched it
            args.update(device=r["device"], stream=r["stream"], correlation=r["corr"])
        elif r["corr"] is not None:
            args["correlation"] = r["corr"]
        out.append(
            {
                "ph": "X",
                "cat": cat,
                "name": r["name"],
                "pid": r["rank"],
                "tid": r["stream"],
                "ts": _us(r["ts_ns"] - base),
                "dur": _us(r["dur_ns"]),
                "args": args,
            }
        )
    out += _launch_flows(spans, base)
    out += _wait_slices(waits, base)
    out += _flows(waits, barrier_instances, spans, base)
    if critical_path is not None and critical_path.height:
        out += _critical(critical_path, base)
    if counters is not None:
        out += [
            {
                "ph": "C",
                "name": c["name"],
                "pid": int(c["rank"]),
                "ts": _us(int(c["ts_ns"]) - base),
                "args": {c["name"]: c["value"]},
            }
            for c in counters.sort("rank", "name", "ts_ns").iter_rows(named=True)
        ]
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": base,
        "otherData": {"exported_by": "asaptrace", **(metadata or {})},
        "traceEvents": out,
    }


def _spans(events: pl.LazyFrame | pl.DataFrame) -> pl.DataFrame:
    """The exported columns of every span; ``device`` is the device index (the store's device ``pid``,
    else the rank), ``corr`` null where the store has none (frames without the column included)."""
    ev = events.lazy()
    have = ev.collect_schema().names()

    def opt(name: str, dtype: pl.DataType) -> pl.Expr:
        return pl.col(name).cast(dtype) if name in have else pl.lit(None, dtype)

    return ev.select(
        pl.col("rank").cast(pl.Int64),
        pl.col("stream").cast(pl.Int64),
        pl.col("is_device"),
        pl.col("kind").cast(pl.String),
        pl.col("name").cast(pl.String),
        opt("cat", pl.String()).alias("source_cat"),
        "ts_ns",
        "dur_ns",
        "step",
        "layer",
        "micro_batch",
        pl.coalesce(opt("pid", pl.Int64()), pl.col("rank").cast(pl.Int64)).alias("device"),
        opt("corr", pl.Int64()).alias("corr"),
    ).collect()


def _with_correlation(device: pl.DataFrame) -> pl.DataFrame:
    """Every kernel gets a correlation id, as Kineto's do (readers such as HTA take a kernel without one
    for something else): the store's, or — a replayed store, a format without launches — a fresh one
    per rank above the rank's largest, so it links to nothing."""
    kernel = pl.col("kind") != str(Kind.ANNOTATION)
    missing = kernel & pl.col("corr").is_null()
    fresh = pl.col("corr").max().over("rank").fill_null(-1) + missing.cum_sum().over("rank")
    return device.with_columns(corr=pl.when(missing).then(fresh).otherwise(pl.col("corr")))


def _launch_flows(spans: pl.DataFrame, base: int) -> list[dict[str, Any]]:
    """Kineto's ``ac2g`` arrows, launch → kernel (same correlation on one rank). The id is
    ``rank × stride + correlation`` so a multi-rank document keeps one arrow per pair."""
    launch = spans.filter(~pl.col("is_device") & pl.col("corr").is_not_null())
    if launch.height == 0:
        return []
    stride = 10 ** len(str(int(spans.get_column("corr").max()) + 1))
    kernel = spans.filter(pl.col("is_device") & (pl.col("kind") != str(Kind.ANNOTATION)))
    pairs = launch.select("rank", "corr", host_tid="stream", host_ts="ts_ns").join(
        kernel.select("rank", "corr", "stream", "ts_ns"), on=["rank", "corr"], how="inner"
    )
    out: list[dict[str, Any]] = []
    for p in pairs.sort("rank", "host_ts", "corr").iter_rows(named=True):
        fid = p["rank"] * stride + p["corr"]
        common = {"cat": LAUNCH_CAT, "name": LAUNCH_CAT, "id": fid, "pid": p["rank"]}
        out.append({"ph": "s", **common, "tid": p["host_tid"], "ts": _us(p["host_ts"] - base)})
        out.append({"ph": "f", **common, "bp": "e", "tid": p["stream"], "ts": _us(p["ts_ns"] - base)})
    return out


def _process_metadata(rk: pl.DataFrame, spans: pl.DataFrame, streams: pl.DataFrame | None) -> list[dict]:
    """Process (rank) and thread (stream, wait track) names and sort orders."""
    out: list[dict[str, Any]] = []
    names: dict[tuple[int, int], str] = {}
    if streams is not None:
        for s in streams.iter_rows(named=True):
            if s.get("thread_name"):
                names[(int(s["rank"]), int(s["stream"]))] = s["thread_name"]
    order = rk.with_row_index("_i").sort("dp_group", "rank", nulls_last=True).with_row_index("_sort")
    lanes = spans.select("rank", "stream").unique().sort("rank", "stream")
    for r in order.iter_rows(named=True):
        rank = int(r["rank"])
        dp = "" if r.get("dp_group") is None else f" · DP {r['dp_group']}"
        label = f"rank {rank} · {r.get('role') or 'unknown'}{dp}"
        out.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": label}})
        out.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": rank,
                "tid": 0,
                "args": {"sort_index": r["_sort"]},
            }
        )
        out.append(
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": WAIT_TID, "args": {"name": "barrier wait"}}
        )
        out.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": rank,
                "tid": WAIT_TID,
                "args": {"sort_index": WAIT_TID},
            }
        )
        for (stream,) in lanes.filter(pl.col("rank") == rank).select("stream").iter_rows():
            name = names.get((rank, stream), f"stream {stream}")
            out.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": stream, "args": {"name": name}})
    return out


def _wait_slices(waits: pl.DataFrame, base: int) -> list[dict[str, Any]]:
    keys = ("instance", "step", "layer", "micro_batch", "op", "last_rank", "last_dp_group", "wait_ns")
    return [
        {
            "ph": "X",
            "cat": WAIT_CAT,
            "name": f"wait · {w['op']}",
            "pid": int(w["rank"]),
            "tid": WAIT_TID,
            "ts": _us(w["arrival_ns"] - base),
            "dur": _us(w["wait_ns"]),
            "args": _args(w, keys),
        }
        for w in waits.iter_rows(named=True)
    ]


def _flows(waits: pl.DataFrame, instances: pl.DataFrame, spans: pl.DataFrame, base: int) -> list[dict]:
    """One arrow per waiter: from the last rank's collective kernel (at release) to the wait slice."""
    if waits.height == 0 or "is_last" not in instances.columns:
        return []
    comm = spans.filter(pl.col("kind").is_in(list(COMM_KINDS))).select(
        pl.col("rank").alias("last_rank"), pl.col("ts_ns").alias("release_ns"), "stream"
    )
    src = (
        instances.filter(pl.col("is_last").fill_null(False) & (pl.col("rank") == pl.col("last_rank")))
        .select("instance", pl.col("last_rank").cast(pl.Int64), "release_ns")
        .join(
            comm.sort("last_rank", "release_ns", "stream").unique(
                ["last_rank", "release_ns"], keep="first", maintain_order=True
            ),
            on=["last_rank", "release_ns"],
            how="inner",
        )
    )
    arrows = waits.join(src.select("instance", "stream"), on="instance", how="inner")
    out: list[dict[str, Any]] = []
    for i, a in enumerate(arrows.iter_rows(named=True)):
        out.append(
            {
                "ph": "s",
                "cat": FLOW_CAT,
                "name": "released by last arrival",
                "id": i,
                "pid": int(a["last_rank"]),
                "tid": int(a["stream"]),
                "ts": _us(a["release_ns"] - base),
            }
        )
        out.append(
            {
                "ph": "f",
                "bp": "e",
                "cat": FLOW_CAT,
                "name": "released by last arrival",
                "id": i,
                "pid": int(a["rank"]),
                "tid": WAIT_TID,
                "ts": _us(max(a["release_ns"] - 1, a["arrival_ns"]) - base),
            }
        )
    return out


def _critical(path: pl.DataFrame, base: int) -> list[dict[str, Any]]:
    """The path's pieces as slices on each rank's critical-path thread, an arrow from each to the next."""
    out: list[dict[str, Any]] = []
    ranks = sorted(set(path.get_column("rank").to_list()))
    out += [
        {"ph": "M", "name": "thread_name", "pid": r, "tid": CRITICAL_TID, "args": {"name": "critical path"}}
        for r in ranks
    ]
    rows = path.filter(pl.col("end_ns") >= pl.col("start_ns")).to_dicts()
    for r in rows:
        out.append(
            {
                "ph": "X",
                "cat": CRITICAL_CAT,
                "name": f"{r['kind']} · {r['name']}",
                "pid": r["rank"],
                "tid": CRITICAL_TID,
                "ts": _us(r["start_ns"] - base),
                "dur": _us(r["end_ns"] - r["start_ns"]),
                "args": {"kind": r["kind"], "window": r["window"]},
            }
        )
    flow = 1 << 40  # ids apart from the barrier arrows'
    for i, (a, b) in enumerate(itertools.pairwise(rows)):
        if a["window"] != b["window"]:
            continue
        at = max(a["end_ns"] - 1, a["start_ns"])
        common = {"cat": CRITICAL_CAT, "name": "critical path", "id": flow + i}
        out.append({"ph": "s", **common, "pid": a["rank"], "tid": CRITICAL_TID, "ts": _us(at - base)})
        out.append(
            {
                "ph": "f",
                "bp": "e",
                **common,
                "pid": b["rank"],
                "tid": CRITICAL_TID,
                "ts": _us(b["start_ns"] - base),
            }
        )
    return out


def split_by_rank(trace: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """One document per rank (its events, ``distributedInfo.rank``), for ``asaptrace ingest`` and other
    Kineto readers to read back rank by rank."""
    by_rank: dict[int, list[dict[str, Any]]] = {}
    for e in trace["traceEvents"]:
        by_rank.setdefault(int(e["pid"]), []).append(e)
    world = len(by_rank)
    head = {k: v for k, v in trace.items() if k != "traceEvents"}
    return {
        r: {
            "schemaVersion": 1,
            "distributedInfo": {"rank": r, "world_size": world},
            **head,
            "traceEvents": evs,
        }
        for r, evs in sorted(by_rank.items())
    }


def encode_trace(trace: dict[str, Any]) -> bytes:
    """JSON bytes of a trace document, laid out as Kineto writes it (times as exact decimals).

    The header keys come first, one per line and spaced like ``json.dumps`` (``"rank": 3``), then
    ``traceEvents`` with one event per line: HTA finds a file's rank by a regular expression over its
    lines (``"rank":\\s+N``) and reads the header only up to ``traceEvents``."""
    head = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in trace.items() if k != "traceEvents"]
    events = _ENCODER.encode_lines(trace.get("traceEvents", [])).rstrip(b"\n").replace(b"\n", b",\n  ")
    return ("{\n" + ",\n".join([*head, '  "traceEvents": [\n  '])).encode() + events + b"\n  ]\n}\n"


def write_trace(path: str | Path, trace: dict[str, Any]) -> Path:
    """Write a trace document to ``path`` (gzip when it ends in ``.gz``), atomically (temp file + rename)."""
    path = Path(path)
    data = encode_trace(trace)
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=6, mtime=0)
    return write_atomic(path, data)
