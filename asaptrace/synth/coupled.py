"""Execution model of the coupled deployment: DP attention + EP experts on the same devices.

Every rank runs the same kernel program: the replay's coupled program
(:func:`asaptrace.replay.mechanics.program.coupled_program`, here with all its kernels and dependencies on:
the step's all-gather, the router's gate and layout, DeepEP's ``notify_dispatch`` count exchange
blocking the host before the payload ``dispatch``, the shared expert, dense first layers without
collectives, host launch cost and latency), timed by the replay's lockstep walk
(:func:`asaptrace.replay.mechanics.lockstep.run_chain`) for all ranks at once. A kernel starts when its
stream is free, its inputs are ready and its launch has reached the device; dispatch and combine
are collectives over all ranks: each rank's kernel starts at its own arrival and ends at the
*last* arrival plus the transfer time, so the barrier wait hides inside the early ranks' kernels,
as on real GPUs. With two micro-batches the program interleaves them DeepSeek-style: one
micro-batch's dispatch/combine (communication streams) overlaps the other's attention and experts
(compute). What synth adds is only what a trace shows beyond the timing: per-kernel noise (drawn
in launch order, as the program asks for each kernel's cost), expert loads, annotations and truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from asaptrace.replay.mechanics.lockstep import ChainTimes, run_chain
from asaptrace.replay.mechanics.planner import StepPlan
from asaptrace.replay.mechanics.program import ProgramShape, coupled_program
from asaptrace.synth.config import SynthConfig
from asaptrace.synth.costs import KernelCosts, kernel_costs
from asaptrace.synth.timeline import (
    Annotation,
    RankMeta,
    SpanRecorder,
    TimelineBuilder,
    device_loads,
    expert_popularity,
    jitter,
    ms,
)
from asaptrace.workload.requests import Requests

#: the truth.json name of the collective instance a barrier position opens (by its chain kind)
_INSTANCE = {"collective": "allgather", "dispatch": "dispatch", "combine": "combine"}


def coupled_ranks(cfg: SynthConfig) -> list[RankMeta]:
    d = cfg.deployment
    per_node = d.devices_per_node
    return [
        RankMeta(r, "fused", r // d.tp, r % d.tp, r, r // per_node, r % per_node) for r in range(d.dp * d.tp)
    ]


def program_shape(cfg: SynthConfig) -> ProgramShape:
    """The replay's coupled program with every kernel a DeepEP trace shows, and the host."""
    c = cfg.costs
    return ProgramShape(
        layers=cfg.model.layers,
        micro_batches=cfg.deployment.micro_batches,
        dense_layers=cfg.model.dense_layers,
        router=True,
        count_exchange=True,
        host_blocking=True,  # DeepEP's normal dispatch: the host reads the received counts
        shared_expert=True,
        step_collective=True,
        launch_ns=int(ms(c.launch_us / 1000)),
        launch_latency_ns=int(ms(c.launch_latency_us / 1000)),
    )


def simulate_coupled(
    cfg: SynthConfig,
    reqs: Requests,
    plans: list[StepPlan],
    rng: np.random.Generator,
    builder: TimelineBuilder,
) -> dict[str, Any]:
    """Fill ``builder`` with the run's kernels and annotations; returns the truth parts it knows."""
    d, m, c, s = cfg.deployment, cfg.model, cfg.costs, cfg.straggler
    kc = kernel_costs(cfg)
    shape = program_shape(cfg)
    n = d.dp * d.tp
    group = np.arange(n) // d.tp
    slow = np.ones(n)
    if s.slow_rank >= 0:
        slow[s.slow_rank] = s.slow_factor
    pop = expert_popularity(rng, m.experts, m.layers, s.routing_skew, s.hot_expert, s.hot_factor)
    waits: dict[str, list] = {
        k: [] for k in ("step", "layer", "micro_batch", "op", "rank", "arrival_ns", "release_ns")
    }
    steps_truth = []
    loads_truth: dict[str, list] = {"step": [], "layer": [], "micro_batch": [], "assignments": []}
    new_tok = reqs.seq_len - reqs.cached_len
    # Σ c(2P + c) = Σ s² − P²: the causal quadratic term of the new tokens over their cached prefix
    quad = reqs.seq_len.astype(np.float64) ** 2 - reqs.cached_len.astype(np.float64) ** 2
    prev_end = None
    noise = _Noise(rng, c.jitter, slow)
    for plan in plans:
        t_start = plan.ready_ns if prev_end is None else max(prev_end + int(ms(c.step_gap_ms)), plan.ready_ns)
        t0 = t_start + rng.integers(
            0, 50_000, n
        )  # the step's broadcast reaches hosts at slightly different times
        tokens = np.zeros((d.dp, d.micro_batches))
        sq = np.zeros((d.dp, d.micro_batches))
        nreq = np.zeros((d.dp, d.micro_batches))
        for (g, mb), idx in plan.slots.items():
            tokens[g, mb], sq[g, mb], nreq[g, mb] = new_tok[idx].sum(), quad[idx].sum(), len(idx)
        attn_ns = kc.attention_ns(tokens, sq, nreq)
        cost = partial(_kernel_cost, cfg, kc, noise, pop, loads_truth, plan.step, group, tokens, attn_ns)
        ct = run_chain(coupled_program(shape, cost, ranks=n, step=plan.step, start_ns=t0))
        spans = _emit(builder, ct, shape, waits)
        host_end = np.maximum(ct.host_end, ct.step_end)  # the host synchronises at the end of the step
        prev_end = int(ct.step_end.max())
        _annotate(builder, plan, reqs, ct, spans, group, t0, host_end)
        steps_truth.append(_step_truth(plan, tokens, sq, attn_ns, t_start, prev_end))
    return {"waits": waits, "steps": steps_truth, "expert_loads": loads_truth}


@dataclass(frozen=True)
class _Noise:
    """Multiplicative kernel noise (and the slow device's factor), drawn when a kernel is costed."""

    rng: np.random.Generator
    sigma: float
    slow: np.ndarray  # (R,) compute slow-down per rank

    def compute(self, base_ns: np.ndarray) -> np.ndarray:
        return np.rint(base_ns * jitter(self.rng, self.sigma, len(self.slow)) * self.slow).astype(np.int64)

    def transfer(self, base_ns: np.ndarray) -> int:
        return int(np.rint(float(base_ns) * float(jitter(self.rng, self.sigma, 1)[0])))


def _kernel_cost(
    cfg: SynthConfig,
    kc: KernelCosts,
    noise: _Noise,
    pop: np.ndarray,
    loads_truth: dict[str, list],
    step: int,
    group: np.ndarray,
    tokens: np.ndarray,
    attn_ns: np.ndarray,
    op: str,
    layer: int,
    mb: int,
) -> np.ndarray | int:
    """One kernel's noisy duration (or a collective's transfer), as the program asks in launch order.

    ``tokens`` (G, M): each group's new tokens per micro-batch; each TP member sends 1/tp of them."""
    c, n = cfg.costs, len(group)
    share = tokens / cfg.deployment.tp
    sh = share[group, mb]
    if op == "attention":
        return noise.compute(attn_ns[group, mb])
    if op in ("dense_mlp", "gate", "shared_expert"):
        c0, c1 = {"dense_mlp": (c.dense_c0, c.dense_c1), "gate": (c.gate_c0, c.gate_c1)}.get(
            op, (c.shared_c0, c.shared_c1)
        )
        return noise.compute(kc.linear_ns(c0, c1, sh))
    if op == "layout":
        return noise.compute(np.full(n, ms(c.layout)))
    if op == "moe":
        loads = device_loads(noise.rng, pop[layer], int(tokens[:, mb].sum()) * cfg.model.top_k, n)
        for key, v in (("step", step), ("layer", layer), ("micro_batch", mb)):
            loads_truth[key].append(v)
        loads_truth["assignments"].append(loads.tolist())
        return noise.compute(kc.moe_ns(loads))
    if op == "dispatch":
        return noise.transfer(kc.transfer_ns(float(share[:, mb].max())))
    if op == "combine":
        return noise.transfer(kc.combine_ns(float(share[:, mb].max())))
    return int(ms({"allgather": c.allgather, "notify": c.notify}[op]))  # fixed, no noise


def _emit(
    builder: TimelineBuilder, ct: ChainTimes, shape: ProgramShape, waits: dict[str, list]
) -> SpanRecorder:
    """The timed program as kernel rows (launch order), its barrier instances into ``waits``."""
    ch, kn = ct.chain, ct.chain.kernels
    if kn is None or ct.launch is None:
        raise TypeError("not a kernel program: the chain has no kernels")
    spans = SpanRecorder()
    n = len(ch.ranks)
    for k, op in enumerate(kn.op):
        start, end, launch = ct.arrival[k], ct.end[k], ct.launch[k]
        layer, mb = int(ch.layer[k]), int(ch.micro_batch[k])
        builder.kernels(
            ch.ranks, op, int(kn.stream[k]), start, end, launch, shape.launch_ns, ch.step, layer, mb
        )
        if layer >= 0:
            spans.add(op, layer, mb, start, end, launch, launch + shape.launch_ns)
        if ch.kind[k]:
            for key, v in (
                ("step", np.full(n, ch.step)),
                ("layer", np.full(n, layer)),
                ("micro_batch", np.full(n, mb)),
                ("op", [_INSTANCE[ch.kind[k]]] * n),
                ("rank", ch.ranks),
                ("arrival_ns", start),
                ("release_ns", np.full(n, ct.release[k])),
            ):
                waits[key].append(v)
    return spans


def _annotate(
    builder: TimelineBuilder,
    plan: StepPlan,
    reqs: Requests,
    ct: ChainTimes,
    spans: SpanRecorder,
    group: np.ndarray,
    t0: np.ndarray,
    host_end: np.ndarray,
) -> None:
    members = {}
    for (g, _mb), idx in plan.slots.items():
        members.setdefault(g, []).extend(idx.tolist())
    first_dev = ct.arrival.min(axis=0)
    ranks = ct.chain.ranks
    for r in range(len(ranks)):
        idx = sorted(members.get(int(group[r]), []))
        args = {
            "step": plan.step,
            "dp_group": int(group[r]),
            **reqs.batch_args(idx),
        }
        builder.annotations.append(
            Annotation(
                r,
                f"prefill_step#{plan.step}",
                int(first_dev[r]),
                int(ct.step_end[r]),
                int(t0[r]),
                int(host_end[r]),
                args,
            )
        )
    spans.emit(builder, ranks, plan.step)


def _step_truth(
    plan: StepPlan, tokens: np.ndarray, sq: np.ndarray, attn_ns: np.ndarray, start: int, end: int
) -> dict[str, Any]:
    g_tok, g_sq = tokens.sum(axis=1), sq.sum(axis=1)
    return {
        "step": plan.step,
        "start_ns": start,
        "end_ns": end,
        "group_tokens": [int(v) for v in g_tok],
        "group_sum_sq": [int(v) for v in g_sq],
        "group_attention_ms_per_layer": [round(float(v) / 1e6, 6) for v in attn_ns.sum(axis=1)],
        "token_imbalance": round(float(g_tok.max() / g_tok.mean()), 6) if g_tok.mean() else 1.0,
        "sum_sq_imbalance": round(float(g_sq.max() / g_sq.mean()), 6) if g_sq.mean() else 1.0,
    }
