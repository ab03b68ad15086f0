"""Topology: each rank's role (fused, attention, expert), DP group, TP index and EP index.

Sources, first that says something wins, column by column:

1. what ingest found in file/folder names (``dp{d}_pp{p}_tp{t}_…_rank{r}``, ``…-TP-x-DP-y-…``);
2. annotations: the ``dp_group`` arg of a rank's step spans;
3. ``--parallel dp=8,tp=4,ep=32``: coupled when dp × tp equals the number of ranks (rank r → DP
   group r // tp, TP index r % tp, EP index r), disaggregated when dp × tp + ep does (the first
   dp × tp ranks are attention devices, the next ep are expert devices, EP index r − dp × tp);
4. the kinds a rank executes: attention and MoE → ``fused``; attention only → ``attention``;
   MoE only → ``expert``; neither → ``unknown``. TP index = order of the rank within its DP group,
   EP index = order among ranks that run MoE.

A run is ``disaggregated`` only when it has both attention-only and expert-only ranks (the ASAP
layout: the experts run somewhere else). Without expert-only ranks, a rank that runs attention
runs its feed-forward part too (dense MLP, or MoE kernels the taxonomy did not recognise), so it
is ``fused``, and the deployment says which run it is: ``single-device`` (one rank running MoE),
``coupled`` (several), ``dense`` (attention but no MoE kernel on any rank: a dense model, or a
single device of one), ``unknown`` (no attention and no MoE: e.g. a recommender model).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from asaptrace.errors import UsageError
from asaptrace.schema import Kind, Role
from asaptrace.units import plural

_PARALLEL = re.compile(r"^\s*(dp|tp|ep|pp)\s*=\s*(\d+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ParallelConfig:
    """A user's statement of the deployment (``--parallel dp=8,tp=4,ep=32``)."""

    dp: int | None = None
    tp: int | None = None
    ep: int | None = None
    pp: int | None = None

    def deployment(self, world: int) -> str:
        """``coupled`` or ``disaggregated`` for a store of ``world`` ranks; raises if neither fits."""
        dp, tp, ep = self.dp or 1, self.tp or 1, self.ep
        if self.dp is None and self.tp is None:
            raise UsageError("--parallel needs at least dp= (and usually tp=, ep=)")
        if dp * tp == world and (ep is None or ep == world or world % ep == 0):
            return "coupled"
        if ep is not None and dp * tp + ep == world:
            return "disaggregated"
        raise UsageError(
            f"--parallel {self.text()} describes {plural(dp * tp, 'device')} (coupled)"
            + (f" or {dp * tp + ep} (disaggregated)" if ep else "")
            + f", but the store has {plural(world, 'rank')}"
        )

    def text(self) -> str:
        return ",".join(
            f"{k}={v}"
            for k, v in (("dp", self.dp), ("tp", self.tp), ("ep", self.ep), ("pp", self.pp))
            if v is not None
        )


def parse_parallel(text: str | None) -> ParallelConfig | None:
    """``"dp=8,tp=4,ep=32"`` → ParallelConfig; None for None or empty text."""
    if text is None or not text.strip():
        return None
    values: dict[str, int] = {}
    for part in text.split(","):
        m = _PARALLEL.match(part)
        if not m:
            raise UsageError(f"--parallel: cannot read {part.strip()!r} (expected e.g. dp=8,tp=4,ep=32)")
        key, value = m.group(1).lower(), int(m.group(2))
        if value < 1:
            raise UsageError(f"--parallel: {key} must be at least 1")
        if key in values:
            raise UsageError(f"--parallel: {key} given twice")
        values[key] = value
    return ParallelConfig(**values)


def rank_kinds(events: pl.DataFrame) -> pl.DataFrame:
    """Per rank: whether it runs attention and MoE kernels (device time > 0)."""
    kind = pl.col("kind").cast(pl.String)
    return (
        events.filter(pl.col("is_device"))
        .group_by("rank")
        .agg(
            (kind == Kind.ATTENTION).any().alias("runs_attention"),
            (kind == Kind.MOE).any().alias("runs_moe"),
        )
    )


def assign_topology(
    ranks: pl.DataFrame,
    events: pl.DataFrame,
    *,
    annotated_dp: pl.DataFrame | None = None,
    parallel: ParallelConfig | None = None,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Fill role, dp_group, tp_index, ep_index of ``ranks``; returns (ranks, parallel meta)."""
    world = ranks.height
    r = ranks.join(rank_kinds(events), on="rank", how="left").with_columns(
        pl.col("runs_attention").fill_null(False), pl.col("runs_moe").fill_null(False)
    )
    if annotated_dp is not None and annotated_dp.height:
        r = r.join(
            annotated_dp.select("rank", pl.col("dp_group").cast(pl.Int32).alias("_ann_dp")),
            on="rank",
            how="left",
        )
    else:
        r = r.with_columns(_ann_dp=pl.lit(None, pl.Int32))
    r = r.with_columns(dp_group=pl.coalesce("dp_group", "_ann_dp"))
    deployment = None
    if parallel is not None:
        deployment = parallel.deployment(world)
        r = _from_parallel(r, parallel, deployment)
    else:
        r = r.with_columns(role=_role_from_kinds(r))
    # what is still unknown: TP index = order within the DP group, EP index = order among MoE runners
    r = r.sort("rank").with_columns(
        tp_index=pl.coalesce(
            "tp_index",
            pl.when(pl.col("dp_group").is_not_null())
            .then(pl.col("rank").rank("ordinal").over("dp_group") - 1)
            .cast(pl.Int32),
        ),
    )
    moe_runner = pl.col("runs_moe") | (pl.col("role") == Role.EXPERT.value)
    r = r.with_columns(
        ep_index=pl.coalesce(
            "ep_index",
            pl.when(moe_runner).then(pl.col("rank").rank("ordinal").over(moe_runner) - 1).cast(pl.Int32),
        )
    )
    meta = _parallel_meta(r, parallel, deployment, world)
    declared = r.get_column("world_size").drop_nulls().max() if "world_size" in r.columns else None
    if declared is not None and int(declared) > world:  # the files say the job had more ranks
        meta["declared_world_size"] = int(declared)
    out = r.drop("runs_attention", "runs_moe", "_ann_dp").with_columns(
        pl.col("dp_group").cast(pl.Int32),
        pl.col("tp_index").cast(pl.Int32),
        pl.col("ep_index").cast(pl.Int32),
        world_size=pl.coalesce(pl.col("world_size"), pl.lit(world)).cast(pl.Int32),
    )
    return out, meta


def _role_from_kinds(r: pl.DataFrame) -> pl.Expr:
    """Role from the kinds a rank runs; attention-only ranks are ``attention`` only beside expert-only ones."""
    attention_only = r.filter(pl.col("runs_attention") & ~pl.col("runs_moe")).height
    expert_only = r.filter(~pl.col("runs_attention") & pl.col("runs_moe")).height
    split = attention_only > 0 and expert_only > 0
    return (
        pl.when(pl.col("runs_attention") & (pl.col("runs_moe") | (not split)))
        .then(pl.lit(Role.FUSED.value))
        .when(pl.col("runs_attention"))
        .then(pl.lit(Role.ATTENTION.value))
        .when(pl.col("runs_moe"))
        .then(pl.lit(Role.EXPERT.value))
        .otherwise(pl.lit(Role.UNKNOWN.value))
    )


def _from_parallel(r: pl.DataFrame, p: ParallelConfig, deployment: str) -> pl.DataFrame:
    tp = p.tp or 1
    rank = pl.col("rank")
    if deployment == "coupled":
        ep_idx = rank if (p.ep is None or p.ep == r.height) else rank % (p.ep or 1)
        return r.with_columns(
            role=pl.lit(Role.FUSED.value),
            dp_group=pl.coalesce("dp_group", (rank // tp).cast(pl.Int32)),
            tp_index=pl.coalesce("tp_index", (rank % tp).cast(pl.Int32)),
            ep_index=pl.coalesce("ep_index", ep_idx.cast(pl.Int32)),
        )
    n_attn = (p.dp or 1) * tp
    attn = rank < n_attn
    return r.with_columns(
        role=pl.when(attn).then(pl.lit(Role.ATTENTION.value)).otherwise(pl.lit(Role.EXPERT.value)),
        dp_group=pl.when(attn).then(pl.coalesce("dp_group", (rank // tp).cast(pl.Int32))).otherwise(None),
        tp_index=pl.when(attn).then(pl.coalesce("tp_index", (rank % tp).cast(pl.Int32))).otherwise(None),
        ep_index=pl.when(attn).then(None).otherwise(pl.coalesce("ep_index", (rank - n_attn).cast(pl.Int32))),
    )


def _parallel_meta(r: pl.DataFrame, p: ParallelConfig | None, deployment: str | None, world: int) -> dict:
    roles = set(r.get_column("role").to_list())
    n_moe = r.filter(pl.col("runs_moe") | (pl.col("role") == Role.EXPERT.value)).height
    if deployment is None:
        if Role.EXPERT.value in roles and Role.ATTENTION.value in roles:
            deployment = "disaggregated"
        elif n_moe == 0 and Role.FUSED.value in roles:
            deployment = "dense"
        elif n_moe and world == 1:
            deployment = "single-device"
        elif n_moe:
            deployment = "coupled"
        else:
            deployment = "unknown"
    groups = r.filter(pl.col("dp_group").is_not_null()).group_by("dp_group").len()
    return {
        "dp": p.dp if p and p.dp else (groups.height or None),
        "tp": p.tp if p and p.tp else (int(groups.get_column("len").max()) if groups.height else None),  # type: ignore[arg-type]
        "ep": p.ep if p and p.ep else (n_moe or None),
        "pp": p.pp if p else None,
        "world_size": world,
        "deployment": deployment,
        "source": "option" if p else "inferred",
    }
