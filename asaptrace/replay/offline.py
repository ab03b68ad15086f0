"""Per-layer costs of a measured store's batches on another deployment (the offline former).

A measured (step, DP group, micro-batch) is one batch. Its costs on a deployment of ``tp``
attention dies per group and an ``experts``-die MoE pool are the *measured* times rescaled by the
cost model's shape (so the measured level is kept and only the change is modelled):

* attention_ns = measured attention-side compute × T_measured / tp (linear TP scaling);
* moe_ns = measured pool time of the (step, layer, micro-batch) × M(n_b, E) / M_ref, where M is
  :meth:`CostModel.moe_ns`, n_b the batch's tokens and M_ref the model of what the measured
  kernels served (coupled: all groups' N tokens on the measured EP ranks in one item;
  disaggregated: each group's item separately). The busiest expert rank's time is measured, so
  the per-expert-rank skew is kept. Without token counts: pool time × (E_meas / E) / groups;
* dispatch_ns, combine_ns = measured transfer × X(n_b / tp) / X(measured tokens per die)
  (unchanged without token counts).

Dense layers (no MoE pool time measured) get moe = dispatch = combine = 0.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from asaptrace.replay.costs import CostModel
from asaptrace.replay.pipelined import Batch
from asaptrace.replay.workload import Workload

_KEYS = ["step", "layer", "micro_batch"]


def item_costs(wl: Workload, costs: CostModel, *, tp: int, experts: float) -> pl.DataFrame:
    """Per (step, dp_group, micro_batch, layer): attention_ns, dispatch_ns, moe_ns, combine_ns."""
    it = wl.items.join(wl.pool, on=_KEYS, how="left", suffix="_pool").join(wl.transfers, on=_KEYS, how="left")
    attn = it["attn_ns"].to_numpy().astype(np.float64) * wl.tp / tp
    pool = it["pool_ns"].fill_null(0).to_numpy().astype(np.float64)
    disp = it["dispatch_ns"].fill_null(0).to_numpy().astype(np.float64)
    comb = it["combine_ns"].fill_null(0).to_numpy().astype(np.float64)
    if wl.has_tokens:
        n_b = it["tokens"].to_numpy()
        if wl.deployment == "coupled":
            ref = costs.moe_ns(it["tokens_pool"].fill_null(0).to_numpy(), wl.expert_ranks).astype(np.float64)
        else:
            own = costs.moe_ns(n_b, wl.expert_ranks).astype(np.float64)
            ref = (
                it.with_columns(_own=pl.Series(own))
                .select(pl.col("_own").sum().over(_KEYS))["_own"]
                .to_numpy()
            )
        moe = pool * costs.moe_ns(n_b, experts) / np.maximum(ref, 1)
        tpd = it["tokens_per_die"].fill_null(0).to_numpy()
        xr = costs.transfer_ns(n_b / tp) / np.maximum(costs.transfer_ns(tpd), 1)
        disp, comb = disp * xr, comb * xr
    else:
        moe = pool * (wl.expert_ranks / experts) / max(wl.n_groups, 1)
    return pl.DataFrame(
        {
            "step": it["step"],
            "dp_group": it["dp_group"],
            "micro_batch": it["micro_batch"],
            "layer": it["layer"],
            "attention_ns": np.rint(attn).astype(np.int64),
            "dispatch_ns": np.where(pool > 0, np.rint(disp), 0).astype(np.int64),
            "moe_ns": np.rint(moe).astype(np.int64),
            "combine_ns": np.where(pool > 0, np.rint(comb), 0).astype(np.int64),
            "max_len": it["max_len"],
        }
    ).sort("step", "dp_group", "micro_batch", "layer")


def offline_batches(
    wl: Workload, costs: CostModel, *, tp: int, experts: float, long_tokens: int | None
) -> list[Batch]:
    """The store's batches with their costs on the target deployment, ready at their step's start.

    ``long_tokens``: a batch holding a prompt longer than this runs alone (None or 0: never).
    """
    ic = item_costs(wl, costs, tp=tp, experts=experts)
    # which micro-batch holds the long prompt: the batches table says, or (when it does not say)
    # the group's micro-batch with the most attention work
    per = ic.group_by("step", "dp_group", "micro_batch").agg(
        pl.col("attention_ns").sum(), pl.col("max_len").max()
    )
    if wl.batches.height and wl.batches["micro_batch"].null_count() and wl.micro_batches > 1:
        heaviest = per.sort("attention_ns", descending=True).unique(["step", "dp_group"], keep="first")
        per = per.join(
            heaviest.select("step", "dp_group", pl.col("micro_batch").alias("_h")), on=["step", "dp_group"]
        )
        per = per.with_columns(
            max_len=pl.when(pl.col("micro_batch") == pl.col("_h")).then("max_len").otherwise(0)
        )
    longest_of = {(s, g, m): v for s, g, m, _, v, *_ in per.iter_rows()}
    ready = dict(zip(wl.steps["step"].to_list(), wl.steps["start_ns"].to_list(), strict=True))
    out = []
    for i, ((step, g, mb), part) in enumerate(
        ic.group_by("step", "dp_group", "micro_batch", maintain_order=True)
    ):
        longest = longest_of[(step, g, mb)]
        out.append(
            Batch(
                batch_id=i,
                ready_ns=int(ready[step]),
                attention_ns=part["attention_ns"].to_numpy(),
                dispatch_ns=part["dispatch_ns"].to_numpy(),
                moe_ns=part["moe_ns"].to_numpy(),
                combine_ns=part["combine_ns"].to_numpy(),
                alone=bool(long_tokens and longest is not None and longest > long_tokens),
                step=int(step),
                key=(int(step), int(g), -1 if mb is None else int(mb)),
            )
        )
    return out
