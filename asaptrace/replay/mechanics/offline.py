"""Per-layer costs of a measured store's batches on another deployment (the offline former).

A measured (step, DP group, micro-batch) is one batch (DOMAIN §7; micro-batch unknown: the group's
whole batch). Its costs on a deployment of ``tp`` attention dies per group and an ``experts``-die
MoE pool are the *measured* times rescaled by the cost model's shape (so the measured level is
kept and only the change is modelled):

* attention_ns = measured attention-side compute × T_measured / tp (the linear TP rule of
  :meth:`CostModel.tp_factor`);
* moe_ns = measured pool time of the (step, layer, micro-batch) × M(n_b, E) / M_ref, where M is
  :meth:`CostModel.moe_ns` (r = E_fit / E, E_fit = ``moe_e_ref``: the dies the constants hold
  for; a fit to a coupled store sets it to the store's EP ranks), n_b the batch's tokens and
  M_ref the model of what the measured kernels served (coupled: all groups' N tokens on the
  measured EP ranks in one item; disaggregated: each group's item separately). The busiest
  expert rank's time is measured, so the per-expert-rank skew is kept. Without token counts:
  the item's share 1/G of the pool time × r(E) / r(E_measured) (linear: the plateau is not seen);
* dispatch_ns, combine_ns = measured transfer × X(n_b / tp) / X(measured tokens per die)
  (unchanged without token counts). A coupled store measures *synchronous* collectives, which
  cost k_s × the asynchronous send (DOMAIN §6): an asynchronous what-if divides them by
  ``coupled_k_s``; a lockstep what-if on a disaggregated store multiplies its sends by it;
* ``whatif_moe_scale`` / ``whatif_transfer_scale`` multiply the modelled pool and transfer
  costs (the ``scale`` knob of ``--vary`` and the fit band; 1 by default);
* per-die noise: a measured item is the slowest of its dies, so on another number of dies it is
  × G(k, σ) / G(k_measured, σ) (:mod:`asaptrace.replay.dispersion`; inside ``moe_ns`` with token
  counts); ``mc_draw`` ≥ 0 draws every kernel once around these expected costs (the
  Monte-Carlo band), each transfer also over its in-flight count when the fit found link
  contention (:func:`asaptrace.replay.contention.drawn_contention`).

:func:`lockstep_split_steps` gives the same work run in lockstep on a split deployment (the
"split cost" step of the counterfactual sequence): per measured (step, micro-batch), every layer
waits for the slowest of the D attention groups (the measured groups dealt onto them longest
first), then one pool item of all the groups' tokens, with the barrier at dispatch and combine.

Dense layers (no MoE pool time measured) get moe = dispatch = combine = 0.

Registered cost parts the measured times do not hold (``in_measured=False``, e.g. a norm kernel a
what-if adds: :mod:`asaptrace.replay.costs.parts`) are costed by their model on each item's tokens
on the target deployment and added to its attention, pool item and sends (:func:`unmeasured_ns`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from asaptrace.replay.contention import drawn_contention
from asaptrace.replay.costs import (
    ATTENTION,
    POOL,
    TRANSFER,
    CostModel,
    LayerWork,
    has_unmeasured,
    resource_ns,
)
from asaptrace.replay.costs.parts import RESOURCES
from asaptrace.replay.dispersion import die_stats, expected_max, fork_join_share, max_draws, order_factor
from asaptrace.replay.mechanics.formers import Batch
from asaptrace.replay.mechanics.planner import place_longest_first
from asaptrace.replay.mechanics.work import MeasuredWork, kept_per_work

_KEYS = ["step", "layer", "micro_batch"]


def _r(costs: CostModel, experts: float) -> float:
    return costs.moe_e_ref / experts if costs.moe_e_ref > 0 else 1.0


@kept_per_work  # the Monte-Carlo band replays one work 32 times: the join does not change
def _joined(wl: MeasuredWork) -> pl.DataFrame:
    """Items with their pool item and transfers (null-safe: an unknown micro-batch matches itself),
    and each item's pool row (``_pool_row``: its (step, layer, micro-batch) numbered once)."""
    return (
        wl.items.join(wl.pool, on=_KEYS, how="left", suffix="_pool", nulls_equal=True)
        .join(wl.transfers, on=_KEYS, how="left", nulls_equal=True)
        .with_columns(_pool_row=pl.struct(_KEYS).rank("dense").cast(pl.Int64) - 1)  # measured_draw's
    )


def _col(it: pl.DataFrame, name: str) -> np.ndarray:
    """A float column of the joined items (zeros when the work predates the column)."""
    return it[name].fill_null(0.0).to_numpy() if name in it.columns else np.zeros(it.height)


def transfer_factor(wl: MeasuredWork, costs: CostModel, asynchronous: bool) -> float:
    """What a measured transfer becomes: coupled store → async ÷ k_s; disaggregated → lockstep × k_s."""
    k_s = costs.coupled_k_s
    if wl.deployment == "coupled":
        return 1.0 / k_s if asynchronous else 1.0
    return 1.0 if asynchronous else k_s


def measured_draw(
    rng: np.random.Generator,
    wl: MeasuredWork,
    cols: dict[str, Any],
    costs: CostModel,
    attn: np.ndarray,
    moe: np.ndarray,
    moe_all: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A Monte-Carlo draw's measured items: each was one draw of its dies' slowest too (the what-if
    replays it as it was), so the band redraws that as well — a factor of mean 1 with the spread of
    the slowest of its n dies (:func:`~asaptrace.replay.dispersion.max_draws`): each attention
    item's wl.tp members; a coupled store's pool row (every group's item of a (step, layer,
    micro-batch) shares its one measured item) or a disaggregated store's served item."""
    attn = attn * max_draws(rng, wl.tp, costs.attn_sigma, cols["n"])
    if wl.deployment == "coupled":
        row = cols["pool_row"]  # each item's pool row, numbered once with the join
        f = max_draws(rng, wl.expert_ranks, costs.moe_sigma, int(row.max(initial=-1)) + 1)[row]
    else:
        f = max_draws(rng, wl.expert_ranks, costs.moe_sigma, cols["n"])
    return attn, moe * f, moe_all * f


def item_costs(
    wl: MeasuredWork,
    costs: CostModel,
    *,
    tp: int,
    experts: float,
    asynchronous: bool = True,
    windows: tuple[int, int] = (1, 1),
) -> pl.DataFrame:
    """Per (step, dp_group, micro_batch, layer): attention_ns, dispatch_ns, moe_ns, combine_ns, and the
    pool item of all groups' tokens (``moe_all_ns``, the lockstep deployment's one item per layer)."""
    it = _joined(wl)
    got = item_cost_arrays(wl, costs, tp=tp, experts=experts, asynchronous=asynchronous, windows=windows)
    return pl.DataFrame(
        {
            "step": it["step"],
            "dp_group": it["dp_group"],
            "micro_batch": it["micro_batch"],
            "layer": it["layer"],
            **got,
            "tokens": it["tokens"],
            "max_len": it["max_len"],
        }
    ).sort("step", "dp_group", "micro_batch", "layer", nulls_last=True)


@kept_per_work
def _columns(wl: MeasuredWork) -> dict[str, Any]:
    """The joined items' columns as :func:`item_cost_arrays` reads them (nulls filled as it fills
    them; read-only: every draw of a Monte-Carlo band reads the same)."""
    it = _joined(wl)
    out: dict[str, Any] = {
        "attn_ns": it["attn_ns"].to_numpy().astype(np.float64),
        "pool_ns": it["pool_ns"].fill_null(0).to_numpy().astype(np.float64),
        "dispatch_ns": it["dispatch_ns"].fill_null(0).to_numpy().astype(np.float64),
        "combine_ns": it["combine_ns"].fill_null(0).to_numpy().astype(np.float64),
        "pool_row": it["_pool_row"].to_numpy(),
        "attn_thr": it["attn_thr"].fill_null(1.0).to_numpy() if "attn_thr" in it.columns else 1.0,
        "moe_thr": it["moe_thr"].fill_null(1.0).to_numpy() if "moe_thr" in it.columns else 0.0,
        "dispatch_in_flight": _col(it, "dispatch_in_flight"),
        "combine_in_flight": _col(it, "combine_in_flight"),
        "n": it.height,
    }
    if wl.has_tokens:
        out["tokens"] = it["tokens"].to_numpy()
        out["n_all"] = it.select(pl.col("tokens").sum().over(_KEYS))["tokens"].to_numpy()
        out["tokens_pool"] = it["tokens_pool"].fill_null(0).to_numpy()
        out["tokens_per_die"] = it["tokens_per_die"].fill_null(0).to_numpy()
    for v in out.values():
        if isinstance(v, np.ndarray):
            v.flags.writeable = False
    return out


def item_cost_arrays(
    wl: MeasuredWork,
    costs: CostModel,
    *,
    tp: int,
    experts: float,
    asynchronous: bool = True,
    windows: tuple[int, int] = (1, 1),
) -> dict[str, np.ndarray]:
    """:func:`item_costs`' cost columns (int64 ns), in the joined items' order (unsorted): what a
    replay that builds its batches itself needs (:func:`offline_batches`), without a frame."""
    it, cols = _joined(wl), _columns(wl)
    attn = cols["attn_ns"] * wl.tp / tp  # linear in the TP size
    pool, disp, comb = cols["pool_ns"], cols["dispatch_ns"], cols["combine_ns"]
    if wl.has_tokens:
        n_b = cols["tokens"]
        n_all = cols["n_all"]
        if wl.deployment == "coupled":
            ref = costs.moe_ns(cols["tokens_pool"], wl.expert_ranks).astype(np.float64)
        else:
            own = costs.moe_ns(n_b, wl.expert_ranks).astype(np.float64)
            ref = (
                it.with_columns(_own=pl.Series(own))
                .select(pl.col("_own").sum().over(_KEYS))["_own"]
                .to_numpy()
            )
        moe = pool * costs.moe_ns(n_b, experts) / np.maximum(ref, 1)
        moe_all = pool * costs.moe_ns(n_all, experts) / np.maximum(ref, 1)
        tpd = cols["tokens_per_die"]
        xr = costs.transfer_ns(n_b / tp) / np.maximum(costs.transfer_ns(tpd), 1)
        disp, comb = disp * xr, comb * xr
    else:
        moe_all = pool * _r(costs, experts) / _r(costs, wl.expert_ranks)
        moe_all *= order_factor(experts, wl.expert_ranks, costs.moe_sigma)
        moe = moe_all / max(wl.n_groups, 1)
    # per-die noise (asaptrace.replay.dispersion): a measured item is the slowest of wl.tp members /
    # the pool's dies; on k dies the expected slowest is × G(k, σ) / G(k_measured, σ) (inside moe_ns
    # for the pool); a Monte-Carlo draw (mc_draw ≥ 0) redraws the k dies of every item
    rng = np.random.default_rng([costs.mc_seed, costs.mc_draw]) if costs.mc_draw >= 0 else None
    if rng is not None:
        attn, moe, moe_all = measured_draw(rng, wl, cols, costs, attn, moe, moe_all)
    a_mean, a_max = die_stats(rng, tp, costs.attn_sigma, cols["n"])
    m_mean, m_max = die_stats(rng, experts, costs.moe_sigma, cols["n"])
    g_a1, g_m1 = expected_max(1, costs.attn_sigma), expected_max(1, costs.moe_sigma)
    g_e = expected_max(experts, costs.moe_sigma)
    attn_late = attn * a_max / expected_max(wl.tp, costs.attn_sigma)  # the slowest of tp members
    moe_late, moe_all = moe * m_max / g_e, moe_all * m_max / g_e  # the slowest of the pool's dies
    if rng is not None and costs.xfer_sigma > 0:  # transfers over the fit's log residuals
        sx = costs.xfer_sigma
        disp = disp * np.exp(sx * rng.standard_normal(cols["n"]) - sx * sx / 2)
        comb = comb * np.exp(sx * rng.standard_normal(cols["n"]) - sx * sx / 2)
    if rng is not None and costs.xfer_contention > 0:  # … over the in-flight counts (plus the prior's)
        n_d, n_c, (p_d, p_c) = cols["dispatch_in_flight"], cols["combine_in_flight"], costs.mc_in_flight
        disp = disp * drawn_contention(rng, costs.xfer_contention, n_d, n_d + p_d)
        comb = comb * drawn_contention(rng, costs.xfer_contention, n_c, n_c + p_c)
    a_add, m_add, m_all_add, x_add = unmeasured_ns(wl, costs, it, tp=tp, experts=experts)
    xs = transfer_factor(wl, costs, asynchronous) * costs.whatif_transfer_scale
    moe_s = costs.whatif_moe_scale
    a_late = m_late = np.zeros(cols["n"])
    if asynchronous:
        # nothing holds a group's members or the pool's dies together but an item's result: each die
        # runs its own queue and an item is back when its slowest die is (the max − busy part rides
        # on the send, which holds no compute; σ = 0: nothing moves). The pool's dies run ahead of
        # their slowest by at most the items in flight (``windows[1]``: groups × slots), so a busy
        # pool pays per item the rate of that closed loop of k dies (``fork_join_share``: the
        # slowest die every item with one in flight, the mean die with many); a group's members
        # (whose next layer waits only on the pool) pay their measured busiest member's own Σ
        # (``attn_thr``; 1 when a collective inside the layers holds them together every item)
        a_thr = cols["attn_thr"]
        a_busy = attn * a_thr * a_mean / g_a1
        # … and never less than its busiest die's own measured Σ (``moe_thr``: a persistently slower
        # die, a hot expert, is a level, not noise)
        m_thr = cols["moe_thr"]
        m_level = moe * np.maximum(fork_join_share(experts, costs.moe_sigma, windows[1]) / g_e, m_thr)
        m_busy = m_level * m_mean / g_m1
        a_late, m_late = np.maximum(attn_late, a_busy) - a_busy, np.maximum(moe_late, m_busy) - m_busy
        attn, moe = a_busy, m_busy
    else:  # in lockstep every die waits for the slowest at each barrier
        attn, moe = attn_late, moe_late
    attn = attn + a_add  # the parts the measured times do not hold (0: none)
    return {
        "attention_ns": np.rint(attn).astype(np.int64),
        "dispatch_ns": np.where(pool > 0, np.rint(disp * xs + a_late + x_add), 0).astype(np.int64),
        "moe_ns": np.rint(moe * moe_s + m_add).astype(np.int64),
        "moe_all_ns": np.rint(moe_all * moe_s + m_all_add).astype(np.int64),
        "combine_ns": np.where(pool > 0, np.rint(comb * xs + m_late * moe_s + x_add), 0).astype(np.int64),
    }


def unmeasured_ns(
    wl: MeasuredWork, costs: CostModel, it: pl.DataFrame, *, tp: int, experts: float
) -> tuple[Any, Any, Any, Any]:
    """Per item, the modelled cost of the registered parts a measured time does not hold
    (:func:`~asaptrace.replay.costs.parts.has_unmeasured`: attention, pool item of the batch and of
    all groups, each send), added to the rescaled measured times; 0 each when there is none (the
    built-in parts alone) or the store has no token counts to cost them by."""
    if not wl.has_tokens or not any(has_unmeasured(r) for r in RESOURCES):
        return 0, 0, 0, 0
    n_b = it["tokens"].to_numpy().astype(np.float64)
    n_all = it.select(pl.col("tokens").sum().over(_KEYS))["tokens"].to_numpy().astype(np.float64)
    quad, n_req = (it[c].fill_null(0).to_numpy().astype(np.float64) for c in ("quad", "n_req"))
    work = LayerWork(n_b, tp, experts, n_b, n_b / tp, quad, n_req)
    dense = it["pool_ns"].fill_null(0).to_numpy() <= 0  # no pool item: nothing on the pool
    pool = np.where(dense, 0, resource_ns(costs, work, POOL, measured=False))
    pool_all = np.where(dense, 0, resource_ns(costs, work._replace(pool_tokens=n_all), POOL, measured=False))
    return (
        resource_ns(costs, work, ATTENTION, measured=False),
        pool,
        pool_all,
        resource_ns(costs, work, TRANSFER, measured=False),
    )


def offline_batches(
    wl: MeasuredWork,
    costs: CostModel,
    *,
    tp: int,
    experts: float,
    long_tokens: int | None,
    windows: tuple[int, int] = (1, 1),
) -> list[Batch]:
    """The store's batches with their costs on the target deployment, ready at their step's start.

    ``long_tokens``: a batch holding a prompt longer than this runs alone (None or 0: never). Which
    micro-batch holds the long prompt: the batches table says, or (when it does not say) the
    group's micro-batch with the most attention work (:func:`_in_heaviest`). The batches'
    layout is kept per work (:func:`_layout`): only their costs change from one replay to the next.
    """
    got = item_cost_arrays(wl, costs, tp=tp, experts=experts, windows=windows)
    lay = _layout(wl)
    cols = {c: got[c][lay.order] for c in ("attention_ns", "dispatch_ns", "moe_ns", "combine_ns")}
    longest = lay.longest
    if wl.batches.height and wl.batches["micro_batch"].null_count() and wl.micro_batches > 1:
        longest = _in_heaviest(lay, cols["attention_ns"])
    return [
        Batch(
            batch_id=i,
            ready_ns=ready,
            attention_ns=cols["attention_ns"][a:b],
            dispatch_ns=cols["dispatch_ns"][a:b],
            moe_ns=cols["moe_ns"][a:b],
            combine_ns=cols["combine_ns"][a:b],
            alone=bool(long_tokens and top is not None and top > long_tokens),
            step=key[0],
            key=key,
        )
        for i, ((a, b), key, ready, top) in enumerate(
            zip(lay.rows, lay.keys, lay.ready, longest, strict=True)
        )
    ]


@dataclass(frozen=True)
class _Layout:
    """The measured batches as runs of the items sorted by (step, group, micro-batch, layer) (the
    order :func:`item_costs` sorts in): ``order`` the items' permutation; per batch its rows
    [a, b), its key (step, group, micro-batch or −1), its step's ready time, its longest prompt and
    whether its micro-batch is known; ``groups`` each (step, group)'s batches."""

    order: np.ndarray
    rows: list[tuple[int, int]]
    keys: list[tuple[int, int, int]]
    ready: list[int]
    longest: list[Any]
    known: list[bool]
    groups: list[list[int]]


@kept_per_work
def _layout(wl: MeasuredWork) -> _Layout:
    it = _joined(wl)
    keyed = it.select("step", "dp_group", "micro_batch", "layer", "max_len").with_row_index("_i")
    srt = keyed.sort("step", "dp_group", "micro_batch", "layer", nulls_last=True)
    per = srt.group_by("step", "dp_group", "micro_batch").agg(pl.col("max_len").max())
    longest_of = {(st, g, m): v for st, g, m, v in per.iter_rows()}
    ready = dict(zip(wl.steps["step"].to_list(), wl.steps["start_ns"].to_list(), strict=True))
    keys = list(zip(*(srt[c].to_list() for c in ("step", "dp_group", "micro_batch")), strict=True))
    starts = [j for j in range(len(keys)) if j == 0 or keys[j] != keys[j - 1]]
    lay = _Layout(srt["_i"].to_numpy(), [], [], [], [], [], [])
    lay.order.flags.writeable = False
    for k, (a, b) in enumerate(zip(starts, [*starts[1:], len(keys)], strict=True)):
        step, g, mb = keys[a]
        lay.rows.append((a, b))
        lay.keys.append((int(step), int(g), -1 if mb is None else int(mb)))
        lay.ready.append(int(ready[step]))
        lay.longest.append(longest_of[(step, g, mb)])
        lay.known.append(mb is not None)
        if not k or lay.keys[k - 1][:2] != lay.keys[k][:2]:
            lay.groups.append([])
        lay.groups[-1].append(k)
    return lay


def _in_heaviest(lay: _Layout, attention: np.ndarray) -> list[Any]:
    """Each batch's longest prompt when the batches table does not say which micro-batch holds it:
    its group's micro-batch with the most attention work (of these costs) holds the group's, the
    others none (0); a group whose heaviest micro-batch is unknown, none at all."""
    if not lay.rows:
        return []
    sums = np.add.reduceat(attention, [a for a, _ in lay.rows]).tolist()
    out: list[Any] = [0] * len(lay.rows)
    for members in lay.groups:
        top = max(members, key=sums.__getitem__)  # the first of equals
        if lay.known[top]:
            out[top] = lay.longest[top]
    return out


@dataclass(frozen=True)
class LockstepCosts:
    """One lockstep sub-step of a split deployment: per-layer costs of a measured (step, micro-batch)."""

    step: int
    micro_batch: int
    ready_ns: int
    attention_ns: np.ndarray  # (D, L): each target group's attention (the measured groups dealt onto it)
    moe_ns: np.ndarray  # (L,): one pool item of every group's tokens
    dispatch_ns: np.ndarray  # (L,): the largest target group's send, after the barrier
    combine_ns: np.ndarray  # (L,)


def lockstep_split_steps(
    wl: MeasuredWork, costs: CostModel, *, groups: int, tp: int, experts: float
) -> list[LockstepCosts]:
    """The store's work on D = ``groups`` × ``tp`` attention dies and an ``experts``-die pool, in lockstep.

    Per measured (step, micro-batch), in order: the measured groups are dealt longest attention
    first onto the D groups (:func:`~asaptrace.replay.mechanics.planner.place_longest_first`); each layer's
    attention is the target group's sum, the pool item holds every group's tokens
    (``moe_all_ns``), and a target group's send is the largest of its dealt groups' (tokens add up:
    X(Σ t / tp) when the store has token counts).
    """
    ic = item_costs(wl, costs, tp=tp, experts=experts, asynchronous=False)
    ready = dict(zip(wl.steps["step"].to_list(), wl.steps["start_ns"].to_list(), strict=True))
    layers = wl.layers
    out: list[LockstepCosts] = []
    for (step, mb), part in ic.group_by("step", "micro_batch", maintain_order=True):
        by_g = part.group_by("dp_group", maintain_order=True).agg(
            pl.col("layer"),
            pl.col("attention_ns"),
            pl.col("dispatch_ns"),
            pl.col("combine_ns"),
            pl.col("tokens").first(),
        )
        g_attn = np.zeros((by_g.height, layers))
        g_disp = np.zeros((by_g.height, layers))
        g_comb = np.zeros((by_g.height, layers))
        for i, (_g, lay, a, d, c, _t) in enumerate(by_g.iter_rows()):
            g_attn[i, lay] = a
            g_disp[i, lay] = d
            g_comb[i, lay] = c
        where = place_longest_first(g_attn.sum(axis=1), groups)
        attn = np.zeros((groups, layers))
        np.add.at(attn, where, g_attn)
        if wl.has_tokens:
            tok = by_g["tokens"].to_numpy().astype(np.float64)
            t_target = np.bincount(where, weights=tok, minlength=groups)
            grow = costs.transfer_ns(t_target[where] / tp) / np.maximum(costs.transfer_ns(tok / tp), 1)
            g_disp, g_comb = g_disp * grow[:, None], g_comb * grow[:, None]
        moe = np.zeros(layers)
        m = part.unique("layer").select("layer", "moe_all_ns")
        moe[m["layer"].to_numpy()] = m["moe_all_ns"].to_numpy()
        out.append(
            LockstepCosts(
                step=int(step),
                micro_batch=-1 if mb is None else int(mb),
                ready_ns=int(ready[step]),
                attention_ns=np.rint(attn).astype(np.int64),
                moe_ns=np.rint(moe).astype(np.int64),
                dispatch_ns=np.rint(g_disp.max(axis=0)).astype(np.int64),
                combine_ns=np.rint(g_comb.max(axis=0)).astype(np.int64),
            )
        )
    return out
