"""Execution model of the coupled deployment: DP attention + EP experts on the same devices.

Every rank runs the same kernel program, so the model walks that program once and computes each
kernel's start and end for all ranks at once (numpy over ranks). A kernel starts when its stream
is free, its inputs are ready and its launch has reached the device; dispatch and combine are
collectives over all ranks: each rank's kernel starts at its own arrival and ends at the *last*
arrival plus the transfer time, so the barrier wait hides inside the early ranks' kernels, as on
real GPUs. A dispatch instance is DeepEP's ``notify_dispatch`` (the count exchange: the barrier)
followed by the payload ``dispatch`` kernel, launched once the host has read the counts. With two
micro-batches the program interleaves them DeepSeek-style: one micro-batch's
dispatch/combine (communication streams) overlaps the other's attention and experts (compute).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from asaptrace.synth.config import SynthConfig
from asaptrace.synth.costs import kernel_costs
from asaptrace.synth.schedule import StepPlan
from asaptrace.synth.timeline import (
    COMPUTE_STREAM,
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

DISPATCH_STREAM, COMBINE_STREAM = 20, 21


def coupled_ranks(cfg: SynthConfig) -> list[RankMeta]:
    d = cfg.deployment
    per_node = d.devices_per_node
    return [
        RankMeta(r, "fused", r // d.tp, r % d.tp, r, r // per_node, r % per_node) for r in range(d.dp * d.tp)
    ]


class _Program:
    """Stream/host state of all ranks during one step, and the op interpreter."""

    def __init__(
        self,
        cfg: SynthConfig,
        rng: np.random.Generator,
        builder: TimelineBuilder,
        step: int,
        t0: np.ndarray,
        truth: dict[str, list],
    ) -> None:
        self.cfg, self.rng, self.b, self.step, self.truth = cfg, rng, builder, step, truth
        self.n = len(t0)
        self.ranks = np.arange(self.n)
        self.host = t0.copy()
        self.free = {COMPUTE_STREAM: t0.copy(), DISPATCH_STREAM: t0.copy(), COMBINE_STREAM: t0.copy()}
        self.launch_ns = int(ms(cfg.costs.launch_us / 1000))
        self.latency_ns = int(ms(cfg.costs.launch_latency_us / 1000))
        self.spans = SpanRecorder()
        self.first_dev = np.full(self.n, np.iinfo(np.int64).max)
        self.last_dev = t0.copy()

    def op(
        self,
        name: str,
        stream: int,
        dep: np.ndarray,
        *,
        dur_ns: np.ndarray | None = None,
        transfer_ns: int | None = None,
        layer: int = -1,
        mb: int = -1,
        sync: bool = False,
        instance: str | None = None,
    ) -> np.ndarray:
        """One kernel on every rank; a collective (``transfer_ns`` given) ends at last arrival + transfer.

        ``instance`` names the collective instance the kernel opens in truth.json (None: not recorded,
        e.g. DeepEP's dispatch payload kernel, whose instance opened with notify_dispatch).
        """
        launch = self.host
        self.host = launch + self.launch_ns
        start = np.maximum(np.maximum(self.free[stream], launch + self.latency_ns), dep)
        if transfer_ns is not None:
            release = int(start.max())
            end = np.full(self.n, release + int(transfer_ns), np.int64)
            if instance is not None:
                t = self.truth
                t["step"].append(np.full(self.n, self.step))
                t["layer"].append(np.full(self.n, layer))
                t["micro_batch"].append(np.full(self.n, mb))
                t["op"].append([instance] * self.n)
                t["rank"].append(self.ranks)
                t["arrival_ns"].append(start)
                t["release_ns"].append(np.full(self.n, release))
        else:
            end = start + np.asarray(dur_ns, np.int64)
        self.free[stream] = end
        if sync:  # DeepEP's normal dispatch: the host reads the received counts before launching
            self.host = np.maximum(self.host, end)
        self.b.kernels(self.ranks, name, stream, start, end, launch, self.launch_ns, self.step, layer, mb)
        self.first_dev = np.minimum(self.first_dev, start)
        self.last_dev = np.maximum(self.last_dev, end)
        if layer >= 0:
            self.spans.add(name, layer, mb, start, end, launch, launch + self.launch_ns)
        return end


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
    loads_truth: dict[str, list] = {"step": [], "layer": [], "micro_batch": [], "rank": [], "assignments": []}
    new_tok = reqs.seq_len - reqs.cached_len
    # Σ c(2P + c) = Σ s² − P²: the causal quadratic term of the new tokens over their cached prefix
    quad = reqs.seq_len.astype(np.float64) ** 2 - reqs.cached_len.astype(np.float64) ** 2
    prev_end = None
    mbs = range(d.micro_batches)

    def noisy(base_ns: np.ndarray) -> np.ndarray:
        return np.rint(base_ns * jitter(rng, c.jitter, n) * slow).astype(np.int64)

    def noisy_transfer(base_ns: np.ndarray) -> int:
        return int(np.rint(float(base_ns) * float(jitter(rng, c.jitter, 1)[0])))

    for plan in plans:
        t_start = plan.ready_ns if prev_end is None else max(prev_end + int(ms(c.step_gap_ms)), plan.ready_ns)
        t0 = t_start + rng.integers(
            0, 50_000, n
        )  # the step's broadcast reaches hosts at slightly different times
        prog = _Program(cfg, rng, builder, plan.step, t0, waits)
        tokens = np.zeros((d.dp, d.micro_batches))
        sq = np.zeros((d.dp, d.micro_batches))
        nreq = np.zeros((d.dp, d.micro_batches))
        for (g, mb), idx in plan.slots.items():
            tokens[g, mb], sq[g, mb], nreq[g, mb] = new_tok[idx].sum(), quad[idx].sum(), len(idx)
        attn_ns = kc.attention_ns(tokens, sq, nreq)
        share = tokens / d.tp  # tokens each TP member sends into the MoE layer
        ready = prog.op("allgather", DISPATCH_STREAM, t0, transfer_ns=ms(c.allgather), instance="allgather")
        ready_mb = {mb: ready for mb in mbs}
        for layer in range(m.layers):
            if layer < m.dense_layers:
                for mb in mbs:
                    a = prog.op(
                        "attention",
                        COMPUTE_STREAM,
                        ready_mb[mb],
                        dur_ns=noisy(attn_ns[group, mb]),
                        layer=layer,
                        mb=mb,
                    )
                    ready_mb[mb] = prog.op(
                        "dense_mlp",
                        COMPUTE_STREAM,
                        a,
                        layer=layer,
                        mb=mb,
                        dur_ns=noisy(kc.linear_ns(c.dense_c0, c.dense_c1, share[group, mb])),
                    )
                continue
            disp = {}
            for mb in mbs:
                sh = share[group, mb]
                a = prog.op(
                    "attention",
                    COMPUTE_STREAM,
                    ready_mb[mb],
                    dur_ns=noisy(attn_ns[group, mb]),
                    layer=layer,
                    mb=mb,
                )
                gt = prog.op(
                    "gate",
                    COMPUTE_STREAM,
                    a,
                    dur_ns=noisy(kc.linear_ns(c.gate_c0, c.gate_c1, sh)),
                    layer=layer,
                    mb=mb,
                )
                lay = prog.op(
                    "layout", COMPUTE_STREAM, gt, dur_ns=noisy(np.full(n, ms(c.layout))), layer=layer, mb=mb
                )
                # notify_dispatch exchanges the per-expert counts with every rank: the barrier of the
                # dispatch instance; the host then reads the counts and launches the payload kernel
                nt = prog.op(
                    "notify",
                    DISPATCH_STREAM,
                    lay,
                    transfer_ns=ms(c.notify),
                    layer=layer,
                    mb=mb,
                    sync=True,
                    instance="dispatch",
                )
                t_tok = float(share[:, mb].max())
                disp[mb] = prog.op(
                    "dispatch",
                    DISPATCH_STREAM,
                    nt,
                    layer=layer,
                    mb=mb,
                    transfer_ns=noisy_transfer(kc.transfer_ns(t_tok)),
                )
                prog.op(
                    "shared_expert",
                    COMPUTE_STREAM,
                    gt,
                    dur_ns=noisy(kc.linear_ns(c.shared_c0, c.shared_c1, sh)),
                    layer=layer,
                    mb=mb,
                )
            for mb in mbs:
                loads = device_loads(rng, pop[layer], int(tokens[:, mb].sum()) * m.top_k, n)
                loads_truth["step"].append(plan.step)
                loads_truth["layer"].append(layer)
                loads_truth["micro_batch"].append(mb)
                loads_truth["assignments"].append(loads.tolist())
                moe = prog.op(
                    "moe",
                    COMPUTE_STREAM,
                    disp[mb],
                    layer=layer,
                    mb=mb,
                    dur_ns=noisy(kc.moe_ns(loads)),
                )
                t_tok = float(share[:, mb].max())
                ready_mb[mb] = prog.op(
                    "combine",
                    COMBINE_STREAM,
                    moe,
                    layer=layer,
                    mb=mb,
                    instance="combine",
                    transfer_ns=noisy_transfer(kc.combine_ns(t_tok)),
                )
        dev_end = prog.last_dev
        host_end = np.maximum(prog.host, dev_end)  # the host synchronises at the end of the step
        prev_end = int(dev_end.max())
        _annotate(builder, plan, reqs, prog, group, t0, host_end)
        steps_truth.append(_step_truth(plan, tokens, sq, attn_ns, t_start, prev_end))
    loads_truth.pop("rank")
    return {"waits": waits, "steps": steps_truth, "expert_loads": loads_truth}


def _annotate(
    builder: TimelineBuilder,
    plan: StepPlan,
    reqs: Requests,
    prog: _Program,
    group: np.ndarray,
    t0: np.ndarray,
    host_end: np.ndarray,
) -> None:
    members = {}
    for (g, _mb), idx in plan.slots.items():
        members.setdefault(g, []).extend(idx.tolist())
    for r in range(prog.n):
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
                int(prog.first_dev[r]),
                int(prog.last_dev[r]),
                int(t0[r]),
                int(host_end[r]),
                args,
            )
        )
    prog.spans.emit(builder, prog.ranks, plan.step)


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
