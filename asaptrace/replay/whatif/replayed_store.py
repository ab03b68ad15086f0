"""Draw a policy replay as canonical tables (events, ranks, streams, batches) of a TraceStore.

The replayed store is an ordinary enriched store, so every analysis works on it unchanged:

* lockstep replays: each rank's dispatch / combine / collective span starts at its *arrival* and
  ends at release + its transfer, at the replayed times (a step starts when its ranks are free) (the early ranks' spans hold the barrier wait, exactly as the
  barrier analysis measures it); compute runs back to back just before each arrival (measured
  chains: the measured kernels' time by kind, layer and micro-batch, compressed if a what-if
  shrank the gap; cost-built chains: one attention span before a dispatch, one MoE span before a
  combine). A step starts at its measured start or when its ranks finished the previous one.
* pipelined replays (micro_batch = the batch's index among its group's batches of the step):
  attention ranks (D groups × T, role ``attention``) carry attention,
  dispatch-send and combine-receive spans (the receive drawn from when the pool finished, so it
  holds the transfer, not a wait); expert ranks (role ``expert``) carry the pool's MoE spans and
  the combine sends. No instance is a barrier (roles attention/expert), so the barrier analysis
  finds zero wait.

Names are ``replay::<kind>``; ``cat`` is ``replay``; stream 7 = compute, 20 = dispatch /
collectives, 21 = combine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from asaptrace.replay.mechanics.lockstep import ChainTimes
from asaptrace.replay.mechanics.work import ChainKernels, MeasuredWork
from asaptrace.replay.policies import PolicyRun
from asaptrace.schema import Kind, Role, conform

COMPUTE, DISPATCH, COMBINE = 7, 20, 21
_COLS = ["rank", "stream", "kind", "ts_ns", "dur_ns", "step", "layer", "micro_batch"]


def replay_store_tables(run: PolicyRun, wl: MeasuredWork) -> dict[str, pa.Table]:
    """Canonical events, ranks, streams and batches of a replay."""
    if run.trace is not None:
        events, ranks, batches = _pipelined(run, wl)
    else:
        events, ranks, batches = _lockstep(run, wl)
    events = events.sort("rank", "ts_ns", "stream")
    ev = events.with_columns(
        pid=pl.col("rank"),
        is_device=pl.lit(True),
        name=pl.concat_str(pl.lit("replay::"), pl.col("kind")),
        cat=pl.lit("replay"),
        corr=pl.lit(None, pl.Int64),
        eid=pl.int_range(pl.len()).over("rank").cast(pl.Int64),
    )
    streams = (
        events.select("rank", "stream")
        .unique()
        .sort("rank", "stream")
        .with_columns(
            pid=pl.col("rank"),
            is_device=pl.lit(True),
            source_pid=pl.col("rank").cast(pl.String),
            source_tid=pl.col("stream").cast(pl.String),
            process_name=pl.lit("replay"),
            process_label=pl.lit(None, pl.String),
            thread_name=pl.format("stream {}", pl.col("stream")),
        )
    )
    return {
        "events": _arrow(ev, "events"),
        "ranks": _arrow(ranks, "ranks"),
        "streams": _arrow(streams, "streams"),
        "batches": _arrow(batches, "batches"),
    }


def _arrow(df: pl.DataFrame, name: str) -> pa.Table:
    from asaptrace.schema import TABLE_SCHEMAS

    schema = TABLE_SCHEMAS[name]
    return conform(df.select(schema.names).to_arrow(), name)


def _rank_rows(rank: list[int], role: list[str], dp: list, tp: list, ep: list) -> pl.DataFrame:
    n = len(rank)
    return pl.DataFrame(
        {
            "rank": rank,
            "role": role,
            "dp_group": dp,
            "tp_index": tp,
            "pp_index": [None] * n,
            "ep_index": ep,
            "world_size": [n] * n,
            "host": ["replay"] * n,
            "device": rank,
            "clock_offset_ns": [0] * n,
            "clock_residual_ns": [0] * n,
            "source_file": ["replay"] * n,
            "format": ["replay"] * n,
            "rank_source": ["replay"] * n,
            "events": [0] * n,
        },
        schema_overrides={"dp_group": pl.Int32, "tp_index": pl.Int32, "ep_index": pl.Int32},
    )


def _with_counts(ranks: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    n = events.group_by("rank").len()
    return (
        ranks.drop("events")
        .join(n.rename({"len": "events"}), on="rank", how="left")
        .with_columns(pl.col("events").fill_null(0).cast(pl.Int64))
    )


# ------------------------------------------------------------------------------------------ lockstep
def _lockstep(run: PolicyRun, wl: MeasuredWork) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    parts = []
    for step in wl.steps.sort("step")["step"].to_list():
        times = run.chains[step]
        busy = run.busy.filter(pl.col("step") == step) if run.busy is not None and len(times) == 1 else None
        parts += [_draw_chain(ct, busy) for ct in times]  # chains run at their replayed times
    events = pl.concat(parts)
    if wl.chains:
        rk = wl.ranks
        ranks = _rank_rows(
            rk["rank"].to_list(),
            [Role.FUSED.value] * rk.height,
            rk["dp_group"].to_list(),
            rk["tp_index"].to_list(),
            rk["ep_index"].to_list(),
        )
    else:
        n = wl.n_groups * wl.tp
        ranks = _rank_rows(
            list(range(n)),
            [Role.FUSED.value] * n,
            [r // wl.tp for r in range(n)],
            [r % wl.tp for r in range(n)],
            list(range(n)),
        )
    return events, _with_counts(ranks, events), wl.batches


#: a kernel program's kernels that open no canonical kind of their own
_PROGRAM_KIND = {
    "notify": Kind.DISPATCH.value,
    "allgather": Kind.COLLECTIVE.value,
    "layout": Kind.COMPUTE.value,
}


def _draw_program(ct: ChainTimes, kn: ChainKernels) -> pl.DataFrame:
    """A kernel program (``chain.kernels``): every kernel as it ran, on its own stream."""
    ch = ct.chain
    k_n, r_n = ch.gap.shape
    kinds = np.array([_PROGRAM_KIND.get(op, op) for op in kn.op], dtype=object)
    return _cast(
        pl.DataFrame(
            {
                "rank": np.tile(ch.ranks, k_n),
                "stream": np.repeat(kn.stream, r_n),
                "kind": np.repeat(kinds, r_n).astype(str),
                "ts_ns": ct.arrival.ravel(),
                "dur_ns": (ct.end - ct.arrival).ravel(),
                "step": np.full(k_n * r_n, ch.step),
                "layer": np.repeat(ch.layer, r_n),
                "micro_batch": np.repeat(ch.micro_batch, r_n),
            }
        )
    ).with_columns(
        layer=pl.when(pl.col("layer") >= 0).then(pl.col("layer")),
        micro_batch=pl.when(pl.col("micro_batch") >= 0).then(pl.col("micro_batch")),
    )


def _draw_chain(ct: ChainTimes, busy: pl.DataFrame | None) -> pl.DataFrame:
    ch = ct.chain
    if ch.kernels is not None:
        return _draw_program(ct, ch.kernels)
    kk, jj = np.nonzero(ch.part)
    kinds = np.array(ch.kind, dtype=object)
    comm = pl.DataFrame(
        {
            "rank": ch.ranks[jj].astype(np.int32),
            "stream": np.where(kinds[kk] == Kind.COMBINE.value, COMBINE, DISPATCH).astype(np.int32),
            "kind": kinds[kk].astype(str),
            "ts_ns": ct.arrival[kk, jj],
            "dur_ns": ct.end[kk, jj] - ct.arrival[kk, jj],
            "step": np.full(len(kk), ch.step, np.int32),
            "layer": ch.layer[kk],
            "micro_batch": ch.micro_batch[kk],
        }
    )
    if busy is None:
        gap = ch.gap[kk, jj]
        keep = gap > 0
        comp = pl.DataFrame(
            {
                "rank": ch.ranks[jj][keep].astype(np.int32),
                "stream": np.full(int(keep.sum()), COMPUTE, np.int32),
                "kind": np.where(
                    kinds[kk][keep] == Kind.DISPATCH.value, Kind.ATTENTION.value, Kind.MOE.value
                ).astype(str),
                "ts_ns": ct.arrival[kk, jj][keep] - gap[keep],
                "dur_ns": gap[keep],
                "step": np.full(int(keep.sum()), ch.step, np.int32),
                "layer": ch.layer[kk][keep],
                "micro_batch": ch.micro_batch[kk][keep],
            }
        )
    else:
        comp = _draw_busy(ct, busy)
    out = pl.concat([_cast(comm), _cast(comp)])
    return out.with_columns(
        layer=pl.when(pl.col("layer") >= 0).then(pl.col("layer")),
        micro_batch=pl.when(pl.col("micro_batch") >= 0).then(pl.col("micro_batch")),
    )


def _draw_busy(ct: ChainTimes, busy: pl.DataFrame) -> pl.DataFrame:
    """Measured compute by (kind, layer, micro-batch), back to back before each replayed arrival."""
    ch = ct.chain
    r_of = {int(r): j for j, r in enumerate(ch.ranks)}
    j = np.array([r_of[int(r)] for r in busy["rank"].to_numpy()], np.int64)
    pos = busy["pos"].to_numpy()
    if ch.n_instances == 0:  # a step without collectives: its compute runs from the rank's start
        win_lo, win_hi = ct.start[j], ct.step_end[j]
    else:
        p = np.maximum(pos, 0)
        ref = ch.ref[p, j]
        ref_end = np.where(ref >= 0, ct.end[np.maximum(ref, 0), j], ct.start[j])
        er = ch.end_ref[j]
        last_end = np.where(er >= 0, ct.end[np.maximum(er, 0), j], ct.start[j])
        win_lo = np.where(pos >= 0, ref_end, last_end)
        win_hi = np.where(pos >= 0, ct.arrival[p, j], ct.step_end[j])
    b = busy.with_columns(
        _lo=pl.Series(win_lo), _len=pl.Series(np.maximum(win_hi - win_lo, 0)), _i=pl.int_range(pl.len())
    ).with_columns(_tot=pl.col("busy_ns").sum().over("rank", "pos"))
    b = b.with_columns(
        _dur=(pl.col("busy_ns") * pl.min_horizontal(pl.lit(1.0), pl.col("_len") / pl.col("_tot").clip(1)))
        .round(0)
        .cast(pl.Int64)
    ).with_columns(_before=pl.col("_dur").cum_sum().over("rank", "pos") - pl.col("_dur"))
    b = b.with_columns(
        _used=pl.col("_dur").sum().over("rank", "pos"),
    ).with_columns(ts_ns=pl.col("_lo") + pl.col("_len") - pl.col("_used") + pl.col("_before"))
    return b.select(
        "rank",
        pl.lit(COMPUTE, pl.Int32).alias("stream"),
        "kind",
        "ts_ns",
        pl.col("_dur").alias("dur_ns"),
        pl.lit(ch.step, pl.Int32).alias("step"),
        pl.col("layer").cast(pl.Int64).fill_null(-1),
        pl.col("micro_batch").cast(pl.Int64).fill_null(-1),
    ).filter(pl.col("dur_ns") > 0)


def _cast(df: pl.DataFrame) -> pl.DataFrame:
    return df.select(
        pl.col("rank").cast(pl.Int32),
        pl.col("stream").cast(pl.Int32),
        pl.col("kind").cast(pl.String),
        pl.col("ts_ns").cast(pl.Int64),
        pl.col("dur_ns").cast(pl.Int64),
        pl.col("step").cast(pl.Int32),
        pl.col("layer").cast(pl.Int64),
        pl.col("micro_batch").cast(pl.Int64),
    )


# ----------------------------------------------------------------------------------------- pipelined
def _pipelined(run: PolicyRun, wl: MeasuredWork) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    tr = run.trace
    assert tr is not None
    dep = run.deployment
    t = dep.tp
    live = dep.experts - (1 if run.params.get("expert_failure") else 0)
    step_of = {b: k[0] for b, k in run.batch_keys.items()}
    # micro_batch of a span = the batch's index among its group's batches of the step (by start),
    # so every (step, layer, micro_batch) of an attention rank is one batch
    first: dict[int, int] = {}
    for b, _g, _layer, t0, _t1 in tr.attention:
        first[b] = min(first.get(b, t0), t0)
    index_of: dict[int, int] = {}
    seen: dict[tuple[int, int], int] = {}
    for b in sorted(first, key=lambda b: (first[b], b)):
        k = (step_of[b], tr.group_of[b])
        index_of[b] = seen.get(k, 0)
        seen[k] = index_of[b] + 1

    def spans(rows: list[tuple], kind: str, stream: int, ranks_of) -> pl.DataFrame:
        if not rows:
            return _cast(pl.DataFrame(schema=dict.fromkeys(_COLS, pl.Int64) | {"kind": pl.String}))
        a = np.array(rows, np.int64)
        bid, layer, t0, t1 = a[:, 0], a[:, -3], a[:, -2], a[:, -1]
        group = a[:, 1] if a.shape[1] == 5 else np.array([tr.group_of[int(x)] for x in bid])
        slot = np.array([index_of[int(x)] for x in bid])
        step = np.array([step_of[int(x)] for x in bid])
        rk = ranks_of(group)  # (n, m)
        m = rk.shape[1]
        return _cast(
            pl.DataFrame(
                {
                    "rank": rk.reshape(-1),
                    "stream": np.full(len(bid) * m, stream),
                    "kind": [kind] * (len(bid) * m),
                    "ts_ns": np.repeat(t0, m),
                    "dur_ns": np.repeat(t1 - t0, m),
                    "step": np.repeat(step, m),
                    "layer": np.repeat(layer, m),
                    "micro_batch": np.repeat(slot, m),
                }
            )
        )

    def attn_ranks(group: np.ndarray) -> np.ndarray:
        return group[:, None] * t + np.arange(t)[None, :]

    def expert_ranks(group: np.ndarray) -> np.ndarray:
        return np.broadcast_to(dep.groups * t + np.arange(live)[None, :], (len(group), live))

    events = pl.concat(
        [
            spans(tr.attention, Kind.ATTENTION.value, COMPUTE, attn_ranks),
            spans(tr.dispatch, Kind.DISPATCH.value, DISPATCH, attn_ranks),
            spans(tr.combine, Kind.COMBINE.value, COMBINE, attn_ranks),
            spans(tr.moe, Kind.MOE.value, COMPUTE, expert_ranks),
            spans(tr.combine, Kind.COMBINE.value, COMBINE, expert_ranks),
        ]
    ).with_columns(
        layer=pl.when(pl.col("layer") >= 0).then(pl.col("layer")),
        micro_batch=pl.col("micro_batch"),
    )
    n_attn = dep.groups * t
    ranks = _rank_rows(
        list(range(n_attn + live)),
        [Role.ATTENTION.value] * n_attn + [Role.EXPERT.value] * live,
        [r // t for r in range(n_attn)] + [None] * live,
        [r % t for r in range(n_attn)] + [None] * live,
        [None] * n_attn + list(range(live)),
    )
    # requests go with their measured (step, group): to the group its first micro-batch went to
    where = {(k[0], k[2]): tr.group_of[b] for b, k in sorted(run.batch_keys.items(), reverse=True)}
    batches = wl.batches
    if batches.height:
        batches = batches.with_columns(
            dp_group=pl.struct("step", "dp_group").map_elements(
                lambda s: where.get((s["step"], s["dp_group"]), s["dp_group"]), return_dtype=pl.Int32
            )
        )
    return events, _with_counts(ranks, events), batches


def replay_meta(run: PolicyRun, wl: MeasuredWork, extra: dict[str, Any]) -> dict[str, Any]:
    """meta.json of a replayed store (enriched; parallel layout of the simulated deployment)."""
    dep = run.deployment
    return {
        "parallel": {
            "dp": dep.groups,
            "tp": dep.tp,
            "ep": dep.experts,
            "pp": None,
            "world_size": dep.devices,
            "deployment": dep.kind,
            "source": "replay",
        },
        "taxonomy_profile": "replay",
        "enriched": True,
        "segmentation": {"step_source": "replay", "layer_source": "replay", "notes": []},
        "clock": {"status": "replayed", "notes": []},
        "batches_source": "replay of " + wl.source,
        "sources": [],
        **extra,
    }


#: what a replayed store's meta.json keeps of its replay (the ReplayResult JSON minus the bulky parts)
REPLAY_BLOCK_DROP = ("store", "out", "seconds", "events")


def replay_block_of(result: Any) -> dict[str, Any]:
    """The ``replay`` block of a replayed store's meta.json: the result's JSON form (schema 2)."""
    return {k: v for k, v in result.to_json().items() if k not in REPLAY_BLOCK_DROP}


def write_replay_store(result: Any, wl: MeasuredWork, out: str | Path, *, overwrite: bool = False) -> Path:
    """Write a :class:`~asaptrace.replay.whatif.run.ReplayResult`'s replay as a store at ``out`` (atomically:
    one commit of the store writer): its events, ranks, streams and batches in the canonical schema,
    and meta.json with its ``replay`` block."""
    from asaptrace.errors import UsageError
    from asaptrace.store import StoreWriter

    run = result.run
    if run is None:
        raise UsageError("this result holds no replay to write")
    tables = replay_store_tables(run, wl)
    n = tables["events"].num_rows
    extra = {
        "accounting": {"read": n, "kept": n, "kept_by_table": {"events": n}, "rejected": {}},
        "replay": {"of": wl.source, **replay_block_of(result)},
    }
    with StoreWriter(out, overwrite=overwrite) as w:
        w.write_part("events", "replay", tables["events"])
        for name in ("ranks", "streams", "batches"):
            w.write_table(name, tables[name])
        store = w.commit(replay_meta(run, wl, extra))
    return store.path


#: the keys a replayed store's ``replay`` block must carry (its reader checks what its writer wrote)
REPLAY_KEYS = ("policy", "steps", "recovered_ns", "error_mean_pct", "error_max_pct")


def read_replay_block(meta: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The ``replay`` block of a replayed store's meta.json (docs/analyses/replay.md); a store that is
    not a replay is a :class:`~asaptrace.errors.UsageError` naming it."""
    from asaptrace.errors import UsageError

    block = meta.get("replay")
    if not isinstance(block, dict):
        raise UsageError("is not a replayed store (its meta.json has no replay block)", path=path)
    missing = [k for k in REPLAY_KEYS if k not in block]
    if missing:
        raise UsageError(f"replay block of meta.json lacks {', '.join(missing)}", path=path)
    return block
