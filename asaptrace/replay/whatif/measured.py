"""The measured work: what a measured store did, with the waiting taken out.

From an enriched store (coupled or disaggregated) :func:`extract_measured_work` builds a
:class:`MeasuredWork`, the replay's only input:

* ``steps`` — per step: measured start, end and step time (device work of every rank);
* ``chains`` — per step (coupled stores only): each rank's sequence of collective instances as
  the barrier analysis matches them (:func:`asaptrace.analyze.barrier.barrier_wait`, on
  :func:`asaptrace.enrich.instances.match_instances`), with the *local gap* before each arrival
  (arrival − end of the rank's latest earlier instance, or the rank's step start), the transfer
  x (shortest peer duration) and each rank's tail (end − release). These are what the lockstep
  replay re-runs (:mod:`asaptrace.replay.mechanics.lockstep`);
* ``busy`` — per (step, rank, chain position, kind, layer, micro-batch): device compute time
  that precedes that arrival (position −1: after the last one) — what the replayed store draws
  and what the what-ifs rescale;
* ``items`` — per (step, DP group, layer, micro-batch): attention-side compute (``attn_ns``, the
  slowest member's non-MoE kernel time), launch gaps (idle inside the group's gaps), and the
  batch composition when known: tokens Σc, causal quadratic Σc(2P+c) and requests (a group's
  batch is split evenly over micro-batches when ``batches`` does not say which is which);
* ``pool`` — per (step, layer, micro-batch): the MoE time of the expert side (busiest expert
  rank ``pool_ns``, the mean, tokens N of every group);
* ``transfers`` — per (step, layer, micro-batch): dispatch and combine transfer (wait removed)
  and tokens per sending die.

Columns:

| table | column | dtype | unit |
|---|---|---|---|
| steps | step, start_ns, end_ns, measured_ns | int32, int64, int64, int64 | ns |
| items | step, dp_group, layer, micro_batch | int32, int32, int16, int8 | – |
| items | attn_ns, launch_gap_ns | int64 | ns |
| items | tokens, quad, n_req (float64), max_len (int64) | nullable | tokens, tokens², requests, longest prompt |
| items | attn_log_ss (float64), attn_dies (int64) | – | Σ squared log residuals of the members' durations, members |
| pool | step, layer, micro_batch, pool_ns, pool_mean_ns, tokens | … | ns, tokens |
| items | attn_thr (float64) | – | the busiest member's Σ ÷ the Σ of each item's slowest member, per (step, group) |
| pool | moe_log_ss (float64), moe_dies (int64), moe_thr (float64) | – | the same over the expert ranks, moe_thr per step (:mod:`asaptrace.replay.dispersion`) |
| transfers | step, layer, micro_batch, dispatch_ns, combine_ns, tokens_per_die | … | ns, tokens |
| transfers | dispatch_in_flight, combine_in_flight (float64) | – | mean transfers in flight at their start (:mod:`asaptrace.replay.contention`) |
| busy | step, rank, pos, kind, layer, micro_batch, busy_ns | … | ns |
"""

from __future__ import annotations

import numpy as np
import polars as pl

from asaptrace.analyze.barrier import barrier_wait
from asaptrace.enrich.instances import match_instances
from asaptrace.errors import UsageError
from asaptrace.info import not_prefill_reason, phase_counts, prefill_steps
from asaptrace.replay.contention import estimate_contention, transfer_kernels, with_in_flight
from asaptrace.replay.costs import causal_pairs
from asaptrace.replay.dispersion import with_noise
from asaptrace.replay.mechanics.work import MeasuredWork, StepChain
from asaptrace.replay.whatif.measured_pool import pool_items
from asaptrace.schema import COMM_KINDS, Kind, Role
from asaptrace.store import TraceStore
from asaptrace.units import plural

_COMM = [str(k) for k in COMM_KINDS]


def extract_measured_work(store: TraceStore, *, prefill_only: bool = True) -> MeasuredWork:
    """Read an enriched store's work (see the module docstring); UsageError if there is none.
    ``prefill_only``: the steps the trace says are prefill (or mixed, or unknown) alone, as every
    what-if of MoE prefill needs; False keeps every step (the coupled consistency check)."""
    if not store.meta.get("enriched"):
        raise UsageError("store is not enriched (ingest it without --no-enrich)", path=store.path)
    ranks = store.read("ranks").select("rank", "role", "dp_group", "tp_index", "ep_index")
    dev = (
        store.events()
        .filter(pl.col("is_device") & (pl.col("kind").cast(pl.String) != Kind.ANNOTATION))
        .filter(pl.col("step").is_not_null())
        .select(
            "rank",
            "stream",
            "is_device",
            pl.col("kind").cast(pl.String),
            pl.col("name").cast(pl.String),
            "ts_ns",
            "dur_ns",
            (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
            "step",
            "layer",
            "micro_batch",
        )
        .collect()
    )
    if dev.height == 0:
        raise UsageError("store has no device work inside steps: nothing to replay", path=store.path)
    notes: list[str] = []
    batches = store.read("batches")
    if prefill_only:
        dev, batches = _prefill_only(store, dev, batches, notes)
    if ranks["dp_group"].null_count() == ranks.height and Role.ATTENTION.value not in ranks["role"].to_list():
        ranks = ranks.with_columns(dp_group=pl.col("rank"), tp_index=pl.lit(0, pl.Int32))
        notes.append(
            "the store does not say the DP groups: each rank is taken as its own group (TP1); "
            "pass --parallel dp=…,tp=… when ingesting"
        )
    roles = set(ranks["role"].to_list())
    deployment = "disaggregated" if Role.ATTENTION.value in roles else "coupled"
    groups = ranks.filter(pl.col("dp_group").is_not_null())
    n_groups = max(groups["dp_group"].n_unique(), 1)
    tp = int(groups.group_by("dp_group").len()["len"].max() or 1) if groups.height else 1
    expert = ranks.filter(pl.col("role") != Role.ATTENTION.value)
    if deployment == "disaggregated":
        expert = ranks.filter(pl.col("role") == Role.EXPERT.value)
    n_mb = int(dev["micro_batch"].drop_nulls().n_unique()) or 1
    layers = int(dev["layer"].max() or 0) + 1 if dev["layer"].drop_nulls().len() else 0

    steps = (
        dev.group_by("step")
        .agg(pl.col("ts_ns").min().alias("start_ns"), pl.col("end_ns").max())
        .with_columns(measured_ns=pl.col("end_ns") - pl.col("start_ns"))
        .sort("step")
    )
    chains: dict[int, StepChain] = {}
    busy, idle = _empty_busy(), _empty_idle()
    bw = None
    if deployment == "coupled":
        bw = barrier_wait(dev, ranks, instances=match_instances(dev, ranks))
        bw = bw.filter(pl.col("step").is_not_null())
        chains, busy, idle = _chains(dev, bw)
    items = _items(dev, ranks, batches, idle)
    pool = pool_items(dev, expert, items, deployment)
    kernels = transfer_kernels(dev, ranks, deployment)
    transfers = with_in_flight(_transfers(dev, ranks, deployment, bw, items, tp), kernels)
    return MeasuredWork(
        source=str(store.path),
        deployment=deployment,
        ranks=ranks,
        n_groups=n_groups,
        tp=tp,
        micro_batches=n_mb,
        expert_ranks=max(expert.height, 1),
        layers=layers,
        steps=steps,
        items=items,
        pool=pool,
        transfers=transfers,
        contention=estimate_contention(kernels),
        busy=busy,
        batches=batches,
        chains=chains,
        notes=notes,
        batches_source=str(store.meta.get("batches_source") or "") if batches.height else "",
    )


def _prefill_only(
    store: TraceStore, dev: pl.DataFrame, batches: pl.DataFrame, notes: list[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The prefill work of the run: the what-ifs model MoE prefill, so the steps the trace marks
    decode or training are left out (said in a note); mixed steps are kept whole, their decode
    tokens with them (said too). A store without phases keeps every step."""
    keep = prefill_steps(store.meta)
    if keep is None:
        return dev, batches
    if not keep:
        raise UsageError(
            not_prefill_reason(store.meta) or "the store holds no prefill to replay", path=store.path
        )
    counts = phase_counts(store.meta)
    left = {p: n for p, n in counts.items() if p in ("decode", "training")}
    if left:
        said = " and ".join(plural(n, f"{p} step") for p, n in left.items())
        notes.append(f"{said} left out: the what-ifs model prefill, and replay only the prefill steps")
    if counts.get("mixed"):
        notes.append(f"{plural(counts['mixed'], 'mixed step')} replayed whole, their decode tokens with them")
    return dev.filter(pl.col("step").is_in(keep)), batches.filter(pl.col("step").is_in(keep))


# ------------------------------------------------------------------------------------------ chains
def _chains(dev: pl.DataFrame, bw: pl.DataFrame) -> tuple[dict[int, StepChain], pl.DataFrame, pl.DataFrame]:
    starts = dev.group_by("step", "rank").agg(
        pl.col("ts_ns").min().alias("start"), pl.col("end_ns").max().alias("last")
    )
    compute = dev.filter(~pl.col("kind").is_in(_COMM))
    chains: dict[int, StepChain] = {}
    busy_parts, idle_parts = [], []
    bw = bw.sort("release_ns", "instance")
    for step in sorted(starts["step"].unique().to_list()):
        # every rank with work in the step takes part in the chain (a rank in no instance just
        # runs from its start to its end); a step without any instance is an empty chain
        sb = bw.filter(pl.col("step") == step)
        order = sb.select("instance", "release_ns").unique("instance", maintain_order=True)
        inst_ids = order["instance"].to_numpy()
        k_of = {int(i): k for k, i in enumerate(inst_ids)}
        rk = np.sort(starts.filter(pl.col("step") == step)["rank"].to_numpy())
        r_of = {int(r): j for j, r in enumerate(rk)}
        K, R = len(inst_ids), len(rk)
        ki = np.array([k_of[int(i)] for i in sb["instance"].to_numpy()], np.int64)
        ri = np.array([r_of[int(r)] for r in sb["rank"].to_numpy()], np.int64)
        arr = np.zeros((K, R), np.int64)
        end = np.zeros((K, R), np.int64)
        part = np.zeros((K, R), bool)
        arr[ki, ri] = sb["arrival_ns"].to_numpy()
        end[ki, ri] = sb["end_ns"].to_numpy()
        part[ki, ri] = True
        rel = np.zeros(K, np.int64)
        rel[ki] = sb["release_ns"].to_numpy()
        xfer = np.zeros(K, np.int64)
        xfer[ki] = sb["transfer_ns"].to_numpy()
        first = sb.unique("instance", maintain_order=True)
        kinds: list[str] = [""] * K
        layer = np.full(K, -1, np.int64)
        mb = np.full(K, -1, np.int64)
        for row in first.iter_rows(named=True):
            k = k_of[int(row["instance"])]
            kinds[k] = row["kind"]
            layer[k] = -1 if row["layer"] is None else row["layer"]
            mb[k] = -1 if row["micro_batch"] is None else row["micro_batch"]
        st = starts.filter(pl.col("step") == step)
        s_map = dict(zip(st["rank"].to_list(), st["start"].to_list(), strict=True))
        l_map = dict(zip(st["rank"].to_list(), st["last"].to_list(), strict=True))
        start = np.array([s_map[int(r)] for r in rk], np.int64)
        last = np.array([l_map[int(r)] for r in rk], np.int64)
        ref = np.full((K, R), -1, np.int64)
        end_ref = np.full(R, -1, np.int64)
        for j in range(R):
            ks = np.flatnonzero(part[:, j])
            e = end[ks, j]
            o = np.argsort(e, kind="stable")
            es, kso = e[o], ks[o]
            # latest end among this rank's instances ending no later than each arrival (not itself)
            pos = np.searchsorted(es, arr[ks, j], side="right") - 1
            cand = np.where(pos >= 0, kso[np.maximum(pos, 0)], -1)
            # an instance cannot be its own reference (zero-length transfer): step back once
            same = cand == ks
            back = np.where(pos >= 1, kso[np.maximum(pos - 1, 0)], -1)
            ref[ks, j] = np.where(same, back, cand)
            p_end = np.searchsorted(es, last[j], side="right") - 1
            end_ref[j] = kso[p_end] if p_end >= 0 else -1
        rows = np.arange(R)
        ref_end = np.where(ref >= 0, end[np.maximum(ref, 0), rows[None, :]], start[None, :])
        gap = np.where(part, arr - ref_end, 0)
        tail = np.where(part, end - rel[:, None], 0)
        end_tail = last - (np.where(end_ref >= 0, end[np.maximum(end_ref, 0), rows], start) if K else start)
        chains[int(step)] = StepChain(
            step=int(step),
            ranks=rk,
            kind=kinds,
            layer=layer,
            micro_batch=mb,
            part=part,
            gap=gap,
            ref=ref,
            tail=tail,
            transfer=xfer,
            start=start,
            end_ref=end_ref,
            end_tail=end_tail,
            measured_arrival=arr,
            measured_end=end,
        )
        b = _busy(compute.filter(pl.col("step") == step), int(step), rk, arr, part)
        busy_parts.append(b)
        idle_parts.append(_idle(b, chains[int(step)]))
    if not busy_parts:
        return chains, _empty_busy(), _empty_idle()
    return chains, pl.concat(busy_parts), pl.concat(idle_parts)


def _idle(busy: pl.DataFrame, ch: StepChain) -> pl.DataFrame:
    """Idle device time inside each dispatch gap (gap − compute before the arrival): launch gaps."""
    r_of = {int(r): j for j, r in enumerate(ch.ranks)}
    used = np.zeros_like(ch.gap)
    s = busy.filter(pl.col("pos") >= 0).group_by("rank", "pos").agg(pl.col("busy_ns").sum())
    if s.height:
        used[s["pos"].to_numpy(), [r_of[int(r)] for r in s["rank"].to_numpy()]] = s["busy_ns"].to_numpy()
    idle = np.maximum(ch.gap - used, 0)
    disp = np.array([k == Kind.DISPATCH.value for k in ch.kind], bool)
    kk, jj = np.nonzero(ch.part & disp[:, None])
    return pl.DataFrame(
        {
            "step": np.full(len(kk), ch.step),
            "rank": ch.ranks[jj],
            "layer": ch.layer[kk],
            "micro_batch": ch.micro_batch[kk],
            "idle_ns": idle[kk, jj],
        }
    ).cast(_empty_idle().schema)  # type: ignore[arg-type]


def _empty_idle() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "step": pl.Int32,
            "rank": pl.Int32,
            "layer": pl.Int16,
            "micro_batch": pl.Int8,
            "idle_ns": pl.Int64,
        }
    )


def _busy(comp: pl.DataFrame, step: int, rk: np.ndarray, arr: np.ndarray, part: np.ndarray) -> pl.DataFrame:
    """Assign each compute kernel to the first arrival at or after its end (−1: after the last)."""
    if comp.height == 0:
        return _empty_busy()
    kk, jj = np.nonzero(part)
    arrivals = pl.DataFrame(
        {"rank": rk[jj].astype(np.int32), "pos": kk.astype(np.int64), "arrival": arr[kk, jj]}
    ).sort("arrival")
    return (
        comp.select(pl.col("rank").cast(pl.Int32), "kind", "layer", "micro_batch", "dur_ns", "end_ns")
        .with_row_index("_i")
        .sort("end_ns")
        .join_asof(
            arrivals,
            left_on="end_ns",
            right_on="arrival",
            by="rank",
            strategy="forward",
            check_sortedness=False,
        )
        .sort("_i")
        .with_columns(step=pl.lit(step, pl.Int32), pos=pl.col("pos").fill_null(-1))
        .group_by("step", "rank", "pos", "kind", "layer", "micro_batch", maintain_order=True)
        .agg(pl.col("dur_ns").sum().alias("busy_ns"))
        .select(_empty_busy().columns)
        .cast(_empty_busy().schema)  # type: ignore[arg-type]
    )


def _empty_busy() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "step": pl.Int32,
            "rank": pl.Int32,
            "pos": pl.Int64,
            "kind": pl.String,
            "layer": pl.Int16,
            "micro_batch": pl.Int8,
            "busy_ns": pl.Int64,
        }
    )


# ------------------------------------------------------------------------------------------- items
def _items(dev: pl.DataFrame, ranks: pl.DataFrame, batches: pl.DataFrame, idle: pl.DataFrame) -> pl.DataFrame:
    attn_side = ranks.filter(pl.col("dp_group").is_not_null()).select("rank", "dp_group")
    comp = dev.filter(~pl.col("kind").is_in([*_COMM, Kind.MOE.value]) & pl.col("layer").is_not_null())
    per_rank = (
        comp.join(attn_side, on="rank")
        .group_by("step", "dp_group", "layer", "micro_batch", "rank")
        .agg(pl.col("dur_ns").sum().alias("attn_ns"))
    )
    items = per_rank.group_by("step", "dp_group", "layer", "micro_batch").agg(pl.col("attn_ns").max())
    # the members' own durations give the per-die noise; members run their own queues unless a
    # collective inside the layers (TP all-reduce) holds them together at every item
    synced = dev.filter((pl.col("kind") == Kind.COLLECTIVE.value) & pl.col("layer").is_not_null())
    span = None if synced.join(attn_side, on="rank").height else ["step", "dp_group"]
    items = with_noise(items, per_rank, ["step", "dp_group", "layer", "micro_batch"], span, "attn_ns", "attn")
    # launch gaps: the idle part of the gaps before dispatch arrivals (slowest member)
    gaps = (
        idle.join(attn_side, on="rank")
        .group_by("step", "dp_group", "layer", "micro_batch")
        .agg(pl.col("idle_ns").max().alias("launch_gap_ns"))
    )
    items = items.join(gaps, on=["step", "dp_group", "layer", "micro_batch"], how="left", nulls_equal=True)
    items = _with_composition(items, batches)
    return items.select(
        pl.col("step").cast(pl.Int32),
        pl.col("dp_group").cast(pl.Int32),
        pl.col("layer").cast(pl.Int16),
        pl.col("micro_batch").cast(pl.Int8),
        pl.col("attn_ns").cast(pl.Int64),
        pl.col("launch_gap_ns").fill_null(0).cast(pl.Int64),
        pl.col("tokens").cast(pl.Float64),
        pl.col("quad").cast(pl.Float64),
        pl.col("n_req").cast(pl.Float64),
        pl.col("max_len").cast(pl.Int64),
        pl.col("attn_log_ss").fill_null(0.0).cast(pl.Float64),
        pl.col("attn_dies").fill_null(0).cast(pl.Int64),
        pl.col("attn_thr").fill_null(1.0).cast(pl.Float64),
    ).sort("step", "dp_group", "layer", "micro_batch")


def _with_composition(items: pl.DataFrame, batches: pl.DataFrame) -> pl.DataFrame:
    """Join each item's batch composition: tokens Σc, causal quadratic Σc(2P+c), requests, longest.

    Keyed by (step, DP group, micro-batch) when both the batches table and the events say which
    micro-batch a request ran in; otherwise the group's whole batch is split evenly over the
    micro-batches its items have (one item when the events carry no micro-batch: the group's whole
    batch is then one batch, DOMAIN §7). The join is null-safe: an item whose micro-batch is
    unknown (null) gets its group's composition, never nothing.
    """
    cols = ("tokens", "quad", "n_req", "max_len")
    if batches.height == 0:
        return items.with_columns(
            *(pl.lit(None, pl.Int64 if c == "max_len" else pl.Float64).alias(c) for c in cols)
        )
    b = batches.with_columns(
        c=(pl.col("seq_len") - pl.col("cached_len").fill_null(0)).cast(pl.Float64),
        p=pl.col("cached_len").fill_null(0).cast(pl.Float64),
    ).with_columns(q=causal_pairs(pl.col("c"), pl.col("p")))
    sums = [
        pl.col("c").sum().alias("tokens"),
        pl.col("q").sum().alias("quad"),
        pl.len().cast(pl.Float64).alias("n_req"),
        pl.col("seq_len").max().cast(pl.Int64).alias("max_len"),
    ]
    by_mb = b["micro_batch"].null_count() == 0 and items["micro_batch"].null_count() == 0
    if by_mb:
        comp = b.group_by("step", "dp_group", "micro_batch").agg(*sums)
        keys = ["step", "dp_group", "micro_batch"]
        joined = items.join(comp.cast({k: items.schema[k] for k in keys}), on=keys, how="left")
        return joined.with_columns(pl.col("n_req").cast(pl.Float64))
    comp = b.group_by("step", "dp_group").agg(*sums)
    keys = ["step", "dp_group"]
    n_mb = pl.col("micro_batch").n_unique().over("step", "dp_group", "layer").cast(pl.Float64)
    joined = items.join(comp.cast({k: items.schema[k] for k in keys}), on=keys, how="left")
    return joined.with_columns(
        (pl.col("tokens") / n_mb).alias("tokens"),
        (pl.col("quad") / n_mb).alias("quad"),
        (pl.col("n_req") / n_mb).alias("n_req"),
    )


def _transfers(
    dev: pl.DataFrame,
    ranks: pl.DataFrame,
    deployment: str,
    bw: pl.DataFrame | None,
    items: pl.DataFrame,
    tp: int,
) -> pl.DataFrame:
    keys = ["step", "layer", "micro_batch"]
    if bw is not None and bw.height:
        x = bw.filter(pl.col("kind").is_in([Kind.DISPATCH.value, Kind.COMBINE.value])).unique("instance")
        x = x.group_by(*keys).agg(
            pl.col("transfer_ns").filter(pl.col("kind") == Kind.DISPATCH.value).sum().alias("dispatch_ns"),
            pl.col("transfer_ns").filter(pl.col("kind") == Kind.COMBINE.value).sum().alias("combine_ns"),
        )
    else:
        # asynchronous sends do not wait for peers: the sender's kernel is the transfer (dispatch
        # on the attention side, combine on the expert side; the receivers' kernels spin)
        role = pl.col("role")
        sender = ((pl.col("kind") == Kind.DISPATCH.value) & (role == Role.ATTENTION.value)) | (
            (pl.col("kind") == Kind.COMBINE.value) & (role == Role.EXPERT.value)
        )
        x = (
            dev.join(ranks.select("rank", "role"), on="rank")
            .filter(sender)
            .group_by(*keys)
            .agg(
                pl.col("dur_ns").filter(pl.col("kind") == Kind.DISPATCH.value).median().alias("dispatch_ns"),
                pl.col("dur_ns").filter(pl.col("kind") == Kind.COMBINE.value).median().alias("combine_ns"),
            )
        )
    tok = items.group_by(*keys).agg(
        pl.when(pl.col("tokens").null_count() == 0).then(pl.col("tokens").max() / tp).alias("tokens_per_die")
    )
    return (
        x.join(tok, on=keys, how="left", nulls_equal=True)
        .select(
            pl.col("step").cast(pl.Int32),
            pl.col("layer").cast(pl.Int16),
            pl.col("micro_batch").cast(pl.Int8),
            pl.col("dispatch_ns").fill_null(0).cast(pl.Int64),
            pl.col("combine_ns").fill_null(0).cast(pl.Int64),
            pl.col("tokens_per_die").cast(pl.Float64),
        )
        .filter(pl.col("layer").is_not_null())
        .sort(*keys)
    )
