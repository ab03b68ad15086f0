"""Critical path: the chain of work that set each step's length, across ranks (DOMAIN §9).

For each window — a step (the events' ``step``), or with ``annotation`` each instance of that
annotation as HTA takes it (host ops that start inside it, device work launched from them) — the
window's dependency graph is built (:mod:`asaptrace.analyze._cp_graph`: host ops in call-stack
order, launch → kernel, stream order, synchronisations, and matched collective instances joining
the ranks at their last arrival) and its longest path walked (:mod:`asaptrace.analyze._cp_walk`).
Symbols, per window W:

* L(W) = Σ over the path's edges of their weight (HTA's length: the time inside host ops, device
  spans, launch delays and gaps between kernels; dependencies and synchronisations weigh 0);
* its split by kind — ``compute`` (kernels), ``copy`` (memcpy/memset), ``transfer`` (communication
  kernels; after a matched instance's release), ``barrier`` (a collective's start to its release on
  the path: 0 when the path enters from the last arrival, as it does by construction), ``launch``
  (launch calls and launch delays), ``sync`` (inside synchronising calls), ``host`` (other host
  ops) and ``gap`` (idle between two kernels of a stream) — sums to L(W) exactly, and by rank;
* what-if for kernel K: every span of K in W 20 % (``faster``) shorter, the graph re-walked:
  gain(K) = L(W) − L'(W), with 0 ≤ gain(K) ≤ Σ K's shortening on the path (checked).

:func:`critical_path` returns a :class:`CriticalPaths` of four frames:

``steps`` — one row per window:

| column | dtype | unit | meaning |
|---|---|---|---|
| window | int64 | – | step number, or the annotation's instance (0, 1, …) |
| label | str | – | ``step N`` or the annotation's name |
| length_ns | int64 | ns | L(W) |
| compute_ns … gap_ns | int64 | ns | the split by kind (:data:`KINDS`, each ``<kind>_ns``), Σ = length_ns |
| span_ns | int64 | ns | the window's extent: last end − first start of its events |
| n_ranks | int32 | – | ranks in the window |
| hops | int32 | – | matched instances the path went through |

``by_rank`` — window, rank, on_path_ns (int64, ns): the path's time on each rank.

``path`` — one row per edge of the path that carries time or hops ranks: window, rank, kind, name,
start_ns, end_ns (int64, ns), stream (int32: the device stream or host thread of the piece's
event), in path order.

``kernels`` — the top kernels of each window by time on the path: window, name, kind, count (int32,
spans of it on the path), on_path_ns, shortening_ns (Σ of its on-path spans × ``faster``),
gain_ns (int64, ns: how much shorter W is with every span of it ``faster``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from asaptrace.analyze import _cp_graph as cg
from asaptrace.analyze._common import lazy
from asaptrace.analyze._cp_walk import CycleError, walk
from asaptrace.enrich.instances import match_instances
from asaptrace.schema import COMM_KINDS, Kind

#: Kinds of time on the path, in display order.
KINDS = ("compute", "copy", "transfer", "barrier", "launch", "sync", "host", "gap")
_COMM = {str(k) for k in COMM_KINDS}


__all__ = ["KINDS", "CriticalPaths", "CycleError", "NoWindows", "PathIdentityError", "critical_path"]


class NoWindows(ValueError):
    """The store has no window to walk: no steps, or no annotation of the name asked for."""


class PathIdentityError(ValueError):
    """The path's split does not sum to its length, or a what-if gained more than it shortened."""


@dataclass(frozen=True)
class CriticalPaths:
    """The frames of :func:`critical_path` (columns in the module docstring)."""

    steps: pl.DataFrame
    by_rank: pl.DataFrame
    path: pl.DataFrame
    kernels: pl.DataFrame
    notes: list[str] = field(default_factory=list)


def critical_path(
    events: pl.LazyFrame | pl.DataFrame,
    ranks: pl.LazyFrame | pl.DataFrame | None = None,
    *,
    annotation: str | None = None,
    args: pl.LazyFrame | pl.DataFrame | None = None,
    instances: pl.DataFrame | None = None,
    top: int = 5,
    faster: float = 0.2,
) -> CriticalPaths:
    """The critical path of every step (or of every instance of ``annotation``), across ranks."""
    ev = _with_waits(_graph_events(lazy(events)), args)
    notes = _blind_streams(ev)
    if annotation == "":
        windows = [(0, "whole trace", ev)]
    elif annotation is not None:
        windows = _annotation_windows(lazy(events), ev, annotation)
        if not windows:
            raise NoWindows(f"no annotation named like {annotation!r} in the store")
    else:
        windows = [(int(s), f"step {s}", ev.filter(pl.col("step") == s)) for s in _steps(ev)]
        if not windows:
            raise NoWindows("the store has no steps with events (try --annotation NAME)")
    inst = _joinable(instances if instances is not None else match_instances(lazy(events), ranks))
    rows, by_rank, paths, kernels = [], [], [], []
    for wid, label, frame in windows:
        if frame.height == 0:
            continue
        w = _window(frame)
        joins = _joins(frame, inst)
        g = cg.build_graph(w, joins)
        walked = walk(g)
        kinds = _edge_kinds(g)
        row, rk, pth = _summarise(g, walked, wid, label, kinds)
        rows.append(row)
        by_rank.append(rk)
        paths.append(pth)
        kernels.append(_what_if(g, walked, wid, top, faster, kinds))
    return CriticalPaths(
        pl.DataFrame(rows, schema=_STEP_SCHEMA, orient="row"),
        pl.concat(by_rank) if by_rank else pl.DataFrame(schema=_RANK_SCHEMA),
        pl.concat(paths) if paths else pl.DataFrame(schema=_PATH_SCHEMA),
        pl.concat(kernels) if kernels else pl.DataFrame(schema=_KERNEL_SCHEMA),
        notes,
    )


_STEP_SCHEMA = {
    "window": pl.Int64,
    "label": pl.String,
    "length_ns": pl.Int64,
    **{f"{k}_ns": pl.Int64 for k in KINDS},
    "span_ns": pl.Int64,
    "n_ranks": pl.Int32,
    "hops": pl.Int32,
}
_RANK_SCHEMA = {"window": pl.Int64, "rank": pl.Int32, "on_path_ns": pl.Int64}
_PATH_SCHEMA = {
    "window": pl.Int64,
    "rank": pl.Int32,
    "kind": pl.String,
    "name": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "stream": pl.Int32,
}
_KERNEL_SCHEMA = {
    "window": pl.Int64,
    "name": pl.String,
    "kind": pl.String,
    "count": pl.Int32,
    "on_path_ns": pl.Int64,
    "shortening_ns": pl.Int64,
    "gain_ns": pl.Int64,
}
_COLS = ["rank", "pid", "stream", "is_device", "kind", "name", "ts_ns", "dur_ns", "step", "corr", "eid"]


def _graph_events(ev: pl.LazyFrame) -> pl.DataFrame:
    """The events that are nodes: host ops with a duration, device work (annotations left out)."""
    kind = pl.col("kind").cast(pl.String)
    host = ~pl.col("is_device") & (kind == Kind.HOST) & (pl.col("dur_ns") > 0)
    if "cat" in ev.collect_schema().names():
        host &= pl.col("cat").cast(pl.String).fill_null("") != "python_function"
    device = pl.col("is_device") & (kind != Kind.ANNOTATION)
    return (
        ev.filter(host | device)
        .select(*_COLS[:4], kind.alias("kind"), pl.col("name").cast(pl.String), *_COLS[6:])
        .sort("rank", "ts_ns", "eid")
        .collect()
    )


def _with_waits(ev: pl.DataFrame, args: pl.LazyFrame | pl.DataFrame | None) -> pl.DataFrame:
    """``wait_record``, ``wait_stream``: a CUDA event wait's record correlation and stream, from the
    args' ``extra`` (-1 where none)."""
    out = ev.with_columns(wait_record=pl.lit(-1, pl.Int64), wait_stream=pl.lit(-1, pl.Int64))
    if args is None:
        return out
    extra = pl.col("extra")
    waits = (
        lazy(args)
        .filter(extra.str.contains("wait_on_cuda_event_record_corr_id", literal=True))
        .select(
            "rank",
            "eid",
            extra.str.json_path_match("$.wait_on_cuda_event_record_corr_id").cast(pl.Int64).alias("_rec"),
            extra.str.json_path_match("$.wait_on_stream").cast(pl.Int64).alias("_st"),
        )
        .collect()
    )
    if waits.height == 0:
        return out
    return (
        out.join(waits, on=["rank", "eid"], how="left")
        .with_columns(wait_record=pl.col("_rec").fill_null(-1), wait_stream=pl.col("_st").fill_null(-1))
        .drop("_rec", "_st")
    )


def _blind_streams(ev: pl.DataFrame) -> list[str]:
    """A note when ranks run work on several streams but the trace records no event waits between
    them: what one stream waited for on another is then idle time (``gap``) on the path."""
    dev = ev.filter(pl.col("is_device"))
    streams = dev.group_by("rank").agg(pl.col("stream").n_unique().alias("n"))
    if streams.height == 0 or streams.get_column("n").max() < 2 or (ev.get_column("wait_record") >= 0).any():  # type: ignore[operator]
        return []
    return [
        "work runs on several streams of a rank but the trace records no event waits between them "
        "(Kineto's cuda_sync records with their event's correlation): a stream's wait for another "
        "is counted as gap on the path"
    ]


def _steps(ev: pl.DataFrame) -> list[int]:
    return ev.get_column("step").drop_nulls().unique().sort().to_list()


def _annotation_windows(
    events: pl.LazyFrame, ev: pl.DataFrame, name: str
) -> list[tuple[int, str, pl.DataFrame]]:
    """HTA's window: the k-th instance of the annotation on each rank; host ops that start inside
    it, device work launched by them (or, without a launch, starting inside it)."""
    ann = (
        events.filter(~pl.col("is_device") & pl.col("name").cast(pl.String).str.contains(name, literal=True))
        .select(
            "rank", pl.col("name").cast(pl.String), "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end")
        )
        .sort("rank", "ts_ns")
        .with_columns(k=pl.int_range(pl.len()).over("rank"))
        .collect()
    )
    host = ev.filter(~pl.col("is_device"))
    dev = ev.filter(pl.col("is_device"))
    out = []
    for k in range(int(ann.get_column("k").max() or 0) + 1 if ann.height else 0):
        a = ann.filter(pl.col("k") == k).select(
            "rank", pl.col("ts_ns").alias("a0"), pl.col("end").alias("a1")
        )
        h = host.join(a, on="rank").filter(pl.col("ts_ns").is_between(pl.col("a0"), pl.col("a1")))
        launched = dev.join(h.select("rank", "corr").drop_nulls(), on=["rank", "corr"], how="semi")
        loose = (
            dev.filter(pl.col("corr").is_null())
            .join(a, on="rank")
            .filter(pl.col("ts_ns").is_between(pl.col("a0"), pl.col("a1")))
        )
        frame = pl.concat([h.drop("a0", "a1"), launched, loose.drop("a0", "a1")]).sort("rank", "ts_ns", "eid")
        label = ann.filter(pl.col("k") == k).get_column("name")[0]
        out.append((k, str(label), frame))
    return out


def _window(frame: pl.DataFrame) -> cg.Window:
    f = frame.with_columns(pl.col("corr").fill_null(-1))
    dur = f.get_column("dur_ns").to_numpy()
    ts = f.get_column("ts_ns").to_numpy()
    return cg.Window(
        rank=f.get_column("rank").to_numpy().astype(np.int32),
        thread=(f.get_column("pid").to_numpy().astype(np.int64) << 20) ^ f.get_column("stream").to_numpy(),
        is_device=f.get_column("is_device").to_numpy(),
        kind=f.get_column("kind").to_numpy().astype(object),
        name=f.get_column("name").to_numpy().astype(object),
        ts=ts.astype(np.int64),
        end=(ts + dur).astype(np.int64),
        corr=f.get_column("corr").to_numpy().astype(np.int64),
        eid=f.get_column("eid").to_numpy().astype(np.int64),
        stream=f.get_column("stream").to_numpy().astype(np.int32),
        wait_record=f.get_column("wait_record").to_numpy().astype(np.int64),
        wait_stream=f.get_column("wait_stream").to_numpy().astype(np.int64),
    )


def _joinable(inst: pl.DataFrame) -> pl.DataFrame:
    """Complete instances of two or more ranks, with their last arrival."""
    if inst.height == 0:
        return inst
    return inst.filter(pl.col("complete") & (pl.col("n_ranks") >= 2)).with_columns(
        release=pl.col("arrival_ns").max().over("instance")
    )


def _joins(frame: pl.DataFrame, inst: pl.DataFrame) -> list[tuple[int, list[int], list[int]]]:
    """Per matched instance inside the window: (last arriver's first kernel, first kernels, last
    kernels) as row indices of ``frame``."""
    if inst.height == 0:
        return []
    comm = (
        frame.with_row_index("i")
        .filter(pl.col("is_device") & pl.col("kind").is_in(list(_COMM)))
        .select("i", "rank", "ts_ns", (pl.col("ts_ns") + pl.col("dur_ns")).alias("end"))
    )
    first = comm.group_by("rank", "ts_ns").agg(pl.col("i").min().alias("first"))
    last = comm.group_by("rank", "end").agg(pl.col("i").max().alias("last"))
    m = (
        inst.select("instance", "rank", "arrival_ns", "end_ns", "release")
        .join(first, left_on=["rank", "arrival_ns"], right_on=["rank", "ts_ns"], how="inner")
        .join(last, left_on=["rank", "end_ns"], right_on=["rank", "end"], how="inner")
        .with_columns(n=pl.len().over("instance"))
    )
    whole = inst.group_by("instance").agg(pl.len().alias("want"))
    m = (
        m.join(whole, on="instance")
        .filter(pl.col("n") == pl.col("want"))
        .sort("instance", "arrival_ns", "rank")
    )
    out = []
    for part in m.partition_by("instance", maintain_order=True):
        arr = part.get_column("arrival_ns").to_numpy()
        lastpos = int(np.flatnonzero(arr == arr.max())[0])
        firsts = part.get_column("first").to_list()
        out.append((int(firsts[lastpos]), firsts, part.get_column("last").to_list()))
    return out


def _edge_kinds(g: cg.Graph) -> np.ndarray:
    """What each edge's time is (an index into :data:`KINDS`)."""
    w = g.window
    at = np.maximum(g.attr, 0)
    k = np.full(len(g.src), KINDS.index("host"), np.int8)
    span = g.etype == cg.SPAN
    copy_ev = w.kind == Kind.MEMCPY
    comm_ev = np.isin(w.kind, list(_COMM))
    k[span] = np.where(
        copy_ev[at[span]],
        KINDS.index("copy"),
        np.where(comm_ev[at[span]], KINDS.index("transfer"), KINDS.index("compute")),
    )
    host = g.etype == cg.HOST
    launch_ev = np.isin(w.name, list(cg.LAUNCH_CALLS))  # per event, then per edge: names are many
    blocking_ev = np.isin(w.name, list(cg.BLOCKING_CALLS))
    k[host & launch_ev[at]] = KINDS.index("launch")
    k[host & blocking_ev[at]] = KINDS.index("sync")
    k[g.etype == cg.LAUNCH] = KINDS.index("launch")
    k[g.etype == cg.GAP] = KINDS.index("gap")
    k[g.etype == cg.SYNC] = KINDS.index("sync")
    k[g.etype == cg.JOIN_IN] = KINDS.index("barrier")
    k[g.etype == cg.JOIN_OUT] = KINDS.index("transfer")
    return k


def _summarise(g: cg.Graph, walked, wid: int, label: str, edge_kinds: np.ndarray):
    w = g.window
    pe = walked.path_edges
    kinds = edge_kinds[pe]
    wt = g.weight[pe]
    split = np.bincount(kinds, weights=wt, minlength=len(KINDS)).astype(np.int64)
    if int(split.sum()) != walked.length:
        raise PathIdentityError(
            f"window {label}: the path's split sums to {split.sum()} ns, not {walked.length}"
        )
    rank = g.node_rank[g.dst[pe]]
    used = sum(1 for e in pe if g.etype[e] == cg.JOIN_IN)
    row = (
        wid,
        label,
        walked.length,
        *split.tolist(),
        int(w.end.max() - w.ts.min()),
        len(np.unique(w.rank)),
        used,
    )
    rk = pl.DataFrame({"window": wid, "rank": rank, "on_path_ns": wt}, schema=_RANK_SCHEMA)
    rk = rk.group_by("window", "rank").agg(pl.col("on_path_ns").sum()).sort("rank")
    show = (wt > 0) | (g.etype[pe] == cg.JOIN_IN)
    pe_s = pe[show]
    name_ev = np.where(
        np.isin(g.etype[pe_s], [cg.LAUNCH, cg.GAP]), g.dst[pe_s] // 2, np.maximum(g.attr[pe_s], 0)
    )
    path = pl.DataFrame(
        {
            "window": wid,
            "rank": rank[show],
            "kind": np.asarray(KINDS, object)[kinds[show]],
            "name": w.name[name_ev],
            "start_ns": g.node_ts[g.src[pe_s]],
            "end_ns": g.node_ts[g.dst[pe_s]],
            "stream": w.stream[name_ev],
        },
        schema=_PATH_SCHEMA,
    )
    return row, rk, path


def _what_if(g: cg.Graph, walked, wid: int, top: int, faster: float, edge_kinds: np.ndarray) -> pl.DataFrame:
    """The top kernels on the path, each made ``faster`` everywhere in the window and re-walked."""
    w = g.window
    pe = walked.path_edges
    timed = np.isin(g.etype, [cg.SPAN, cg.JOIN_OUT]) & w.is_device[np.maximum(g.attr, 0)] & (g.attr >= 0)
    on = pe[timed[pe]]
    if len(on) == 0:
        return pl.DataFrame(schema=_KERNEL_SCHEMA)
    names = w.name[g.attr[on]]
    kinds = np.asarray(KINDS, object)[edge_kinds[on]]
    tab = (
        pl.DataFrame({"name": names, "kind": kinds, "w": g.weight[on]})
        .group_by("name")
        .agg(
            pl.col("kind").first(),
            pl.len().cast(pl.Int32).alias("count"),
            pl.col("w").sum().alias("on_path_ns"),
        )
        .sort(["on_path_ns", "name"], descending=[True, False])
        .head(top)
    )
    all_names = w.name[np.maximum(g.attr, 0)]
    out = []
    for name in tab.get_column("name").to_list():
        mine = timed & (all_names == name)
        cut = np.where(mine, np.round(g.weight * faster).astype(np.int64), 0)
        bound = int(cut[pe].sum())
        gain = walked.length - walk(g, g.weight - cut, walked.order).length
        if gain < 0 or gain > bound:
            raise PathIdentityError(f"what-if {name!r}: gain {gain} ns outside [0, {bound}] ns")
        out.append((bound, gain))
    return tab.with_columns(
        window=pl.lit(wid, pl.Int64),
        shortening_ns=pl.Series([b for b, _ in out], dtype=pl.Int64),
        gain_ns=pl.Series([x for _, x in out], dtype=pl.Int64),
    ).select(list(_KERNEL_SCHEMA))
