"""Execution model of the ASAP disaggregated deployment: D×T attention devices + E MoE devices.

Each attention group runs its own program (dual-batch interleaving: batch 0 and 1 alternate layer
by layer) and never waits for another group. A dispatch-send returns once its data is written;
the MoE devices serve (group, step, layer, batch) work items **in arrival order**, whatever group
or layer they come from; a group's combine-receive kernel spins until its own results are back.

The model runs on the replay's event engine (:class:`asaptrace.replay.mechanics.engine.Engine`): group
programs are generators that yield the work item whose result they need next; the engine pops
items by (arrival time, send order), runs them on every MoE device
(receive → grouped GEMM → combine-send, three streams), and resumes the group that waits for the
result. Items are pushed only with arrival times after the one being served, so popping by time
is the MoE devices' true first-come-first-served order.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from asaptrace.replay.mechanics.engine import Engine, Event
from asaptrace.replay.mechanics.planner import StepPlan
from asaptrace.replay.mechanics.program import COMPUTE_STREAM
from asaptrace.synth.config import SynthConfig
from asaptrace.synth.contention import DieSends, Links
from asaptrace.synth.costs import kernel_costs
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

SEND_STREAM, RECV_STREAM = 20, 21
EXPERT_LAUNCH_LEAD_NS = 200_000  # the layer-oblivious super kernel is launched ahead of the data

ItemKey = tuple[int, int, int, int]  # (group, step, layer, batch)


@dataclass(frozen=True)
class ItemAvailable(Event):
    """A work item's data has reached the MoE devices (pushed by a dispatch-send)."""

    key: ItemKey = (0, 0, 0, 0)
    tokens: float = 0.0


def disaggregated_ranks(cfg: SynthConfig) -> list[RankMeta]:
    d = cfg.deployment
    per_node, n_att = d.devices_per_node, d.attn_dp * d.attn_tp
    out = [
        RankMeta(r, "attention", r // d.attn_tp, r % d.attn_tp, None, r // per_node, r % per_node)
        for r in range(n_att)
    ]
    out += [
        RankMeta(r, "expert", None, None, r - n_att, r // per_node, r % per_node)
        for r in range(n_att, n_att + d.expert_devices)
    ]
    return out


class _Devices:
    """Host cursor and stream-free times of a set of ranks, plus span bookkeeping."""

    def __init__(self, ranks: np.ndarray, t0: int) -> None:
        self.ranks = ranks
        n = len(ranks)
        self.host = np.full(n, t0, np.int64)
        self.free = {s: np.full(n, t0, np.int64) for s in (COMPUTE_STREAM, SEND_STREAM, RECV_STREAM)}

    def reset(self, t0: np.ndarray) -> None:
        self.host = t0.copy()
        for s in self.free:
            self.free[s] = np.maximum(self.free[s], t0)


class _GroupStep:
    """One attention group's state during one step: its devices, batches, spans and pending receives."""

    def __init__(self, sim: _Sim, g: int, dev: _Devices, plan: StepPlan, t0: np.ndarray) -> None:
        T = sim.T
        self.sim, self.g, self.dev, self.plan, self.t0 = sim, g, dev, plan, t0
        self.slots = [plan.slots.get((g, b), np.zeros(0, np.int64)) for b in range(sim.nb)]
        self.tok = np.array([sim.new_tok[i].sum() for i in self.slots], np.float64)
        self.sq = np.array([sim.quad[i].sum() for i in self.slots])
        nreq = np.array([len(i) for i in self.slots])
        self.attn_ns = sim.kc.attention_ns(self.tok, self.sq, nreq)
        self.share = self.tok / T
        self.first, self.last = np.full(T, np.iinfo(np.int64).max), t0.copy()
        self.spans = SpanRecorder()
        self.ready = {b: t0.copy() for b in range(sim.nb)}
        self.pending: dict[int, tuple[ItemKey, np.ndarray, np.ndarray]] = {}  # b -> (item, send end, recv)

    def noisy(self, base_ns: Any) -> np.ndarray:
        sim = self.sim
        noise = jitter(sim.rng, sim.cfg.costs.jitter, sim.T) * sim.slow[self.dev.ranks]
        return np.rint(base_ns * noise).astype(np.int64)

    def linear(self, c0: float, c1: float, b: int) -> np.ndarray:
        """A compute kernel linear in batch ``b``'s tokens per member, with its noise."""
        return self.noisy(self.sim.kc.linear_ns(c0, c1, self.share[b]))

    def op(
        self, name: str, stream: int, dep: np.ndarray, dur_ns: np.ndarray, layer: int, b: int
    ) -> np.ndarray:
        sim, dev = self.sim, self.dev
        launch = dev.host
        dev.host = launch + sim.launch_ns
        own = np.maximum(dev.free[stream], launch + sim.lat)
        start = np.maximum(own, dep)
        if name == "attention":  # compute idle because this batch's results are not back yet
            sim.table(
                sim.stalls,
                step=self.plan.step,
                layer=layer,
                micro_batch=b,
                rank=dev.ranks,
                stall_ns=np.maximum(0, dep - own),
            )
        end = start + np.asarray(dur_ns, np.int64)
        dev.free[stream] = end
        self._record(name, stream, start, end, launch, layer, b)
        return end

    def send_plan(self, b: int, dep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each member's start (as ``op`` computes it) and jittered duration of its next dispatch-send."""
        sim = self.sim
        start = np.maximum(np.maximum(self.dev.free[SEND_STREAM], self.dev.host + sim.lat), dep)
        return start, float(sim.kc.transfer_ns(self.share[b])) * jitter(sim.rng, sim.cfg.costs.jitter, sim.T)

    def send(self, layer: int, b: int, dep: np.ndarray, dur: np.ndarray) -> None:
        """Dispatch-send (returns once written) and launch of the matching combine-receive."""
        sim = self.sim
        end = self.op("dispatch_send", SEND_STREAM, dep, np.rint(dur), layer, b)
        key = (self.g, self.plan.step, layer, b)
        sim.push(int(end.max()) + sim.net, key, float(self.tok[b]))
        recv_launch = self.dev.host
        self.dev.host = recv_launch + sim.launch_ns
        self.spans.runs[-1][5] = self.dev.host  # the receive is launched in this run
        self.pending[b] = (key, end, recv_launch)

    def receive(self, b: int, result: int) -> None:
        """The combine-receive kernel spins from its start until the results are back."""
        sim, dev = self.sim, self.dev
        key, send_end, launch = self.pending.pop(b)
        layer = key[2]
        start = np.maximum(np.maximum(dev.free[RECV_STREAM], launch + sim.lat), send_end)
        release = np.maximum(start, result)
        c = sim.cfg.costs
        end = release + sim.kc.linear_ns(c.recv_c0, c.recv_c1, self.share[b])
        dev.free[RECV_STREAM] = end
        self.ready[b] = end
        sim.builder.kernels(
            dev.ranks,
            "combine_recv",
            RECV_STREAM,
            start,
            end,
            launch,
            sim.launch_ns,
            self.plan.step,
            layer,
            b,
        )
        self.spans.extend_device(layer, b, start, end)
        self.first, self.last = np.minimum(self.first, start), np.maximum(self.last, end)
        sim.table(
            sim.waits,
            step=self.plan.step,
            layer=layer,
            micro_batch=b,
            op="combine_recv",
            rank=dev.ranks,
            arrival_ns=start,
            release_ns=release,
        )

    def _record(
        self,
        name: str,
        stream: int,
        start: np.ndarray,
        end: np.ndarray,
        launch: np.ndarray,
        layer: int,
        b: int,
    ) -> None:
        sim = self.sim
        sim.builder.kernels(
            self.dev.ranks, name, stream, start, end, launch, sim.launch_ns, self.plan.step, layer, b
        )
        self.spans.add(name, layer, b, start, end, launch, launch + sim.launch_ns)
        self.first, self.last = np.minimum(self.first, start), np.maximum(self.last, end)


class _Sim:
    """Shared state of the disaggregated run and its event loop."""

    def __init__(
        self,
        cfg: SynthConfig,
        reqs: Requests,
        plans: list[StepPlan],
        rng: np.random.Generator,
        builder: TimelineBuilder,
    ) -> None:
        d, m, c, s = cfg.deployment, cfg.model, cfg.costs, cfg.straggler
        self.cfg, self.reqs, self.plans, self.rng, self.builder = cfg, reqs, plans, rng, builder
        self.kc = kernel_costs(cfg)
        self.T, self.E, self.nb = d.attn_tp, d.expert_devices, 2 if d.dual_batch else 1
        self.n_att = d.attn_dp * d.attn_tp
        self.launch_ns, self.lat = int(ms(c.launch_us / 1000)), int(ms(c.launch_latency_us / 1000))
        self.net = int(ms(c.net_latency_us / 1000))
        self.links, self.out = Links(c.contention), Links(c.contention)  # into and out of the pool
        self.slow = np.ones(self.n_att + self.E)
        if s.slow_rank >= 0:
            self.slow[s.slow_rank] = s.slow_factor
        self.pop = expert_popularity(rng, m.experts, m.layers, s.routing_skew, s.hot_expert, s.hot_factor)
        self.new_tok = reqs.seq_len - reqs.cached_len
        self.quad = reqs.seq_len.astype(np.float64) ** 2 - reqs.cached_len.astype(np.float64) ** 2
        self.outbox: list[Event] = []  # items sent and sends' members to place, for the engine
        self.results: dict[ItemKey, int] = {}
        self.waits: dict[str, list] = {
            k: [] for k in ("step", "layer", "micro_batch", "op", "rank", "arrival_ns", "release_ns")
        }
        self.stalls: dict[str, list] = {k: [] for k in ("step", "layer", "micro_batch", "rank", "stall_ns")}
        self.items: dict[str, list] = {
            k: []
            for k in (
                "group",
                "step",
                "layer",
                "micro_batch",
                "available_ns",
                "result_ns",
                "assignments",
                "start_ns",
                "end_ns",
            )
        }
        self.steps_truth: list[dict[str, Any]] = []
        self.exp = _Devices(np.arange(self.n_att, self.n_att + self.E), 0)
        self.exp_spans: dict[int, list[np.ndarray]] = {}

    def table(self, tab: dict[str, list], **cols: Any) -> None:
        n = self.T
        for k, v in cols.items():
            tab[k].append(v if isinstance(v, np.ndarray) else [v] * n)

    def push(self, t_avail: int, key: ItemKey, tokens: float) -> None:
        self.outbox.append(ItemAvailable(t_avail, key=key, tokens=tokens))

    def _sent(self) -> list[Event]:
        out, self.outbox = self.outbox, []
        return out

    def group_program(self, g: int) -> Generator[ItemKey | list[DieSends], Any, None]:
        """Yields the item whose result the group needs next; is sent that result's arrival time.
        With contention, also yields a send's members, and is sent their slowdowns once placed."""
        c, m = self.cfg.costs, self.cfg.model
        dev = _Devices(np.arange(g * self.T, (g + 1) * self.T), 0)
        prev_end: int | None = None
        for plan in self.plans:
            t_start = (
                plan.ready_ns if prev_end is None else max(prev_end + int(ms(c.step_gap_ms)), plan.ready_ns)
            )
            t0 = t_start + self.rng.integers(0, 50_000, self.T)
            dev.reset(t0)
            st = _GroupStep(self, g, dev, plan, t0)
            for layer in range(m.layers):
                for b in range(self.nb):
                    if b in st.pending:
                        st.receive(b, (yield st.pending[b][0]))
                    a = st.op("attention", COMPUTE_STREAM, st.ready[b], st.noisy(st.attn_ns[b]), layer, b)
                    if layer < m.dense_layers:
                        st.ready[b] = st.op(
                            "dense_mlp", COMPUTE_STREAM, a, st.linear(c.dense_c0, c.dense_c1, b), layer, b
                        )
                        continue
                    gt = st.op("gate", COMPUTE_STREAM, a, st.linear(c.gate_c0, c.gate_c1, b), layer, b)
                    start, dur = st.send_plan(b, gt)
                    if self.links.on:  # each member placed when the engine reaches its start
                        dur = dur * (yield self.links.begin(g, start, dur))
                    st.send(layer, b, gt, dur)
                    # the shared expert runs while the routed experts work; this batch's next attention
                    # follows it on the compute stream and also waits for the combine-receive
                    st.op(
                        "shared_expert", COMPUTE_STREAM, gt, st.linear(c.shared_c0, c.shared_c1, b), layer, b
                    )
            for b in range(self.nb):
                if b in st.pending:
                    st.receive(b, (yield st.pending[b][0]))
            host_end = np.maximum(dev.host, st.last)
            prev_end = int(st.last.max())
            _annotate_group(self.builder, self.reqs, st, host_end)
            self.steps_truth.append(
                {
                    "step": plan.step,
                    "dp_group": g,
                    "start_ns": int(t_start),
                    "end_ns": prev_end,
                    "batch_tokens": [int(v) for v in st.tok],
                    "batch_sum_sq": [int(v) for v in st.sq],
                }
            )

    def serve(self, key: ItemKey, t_avail: int, tokens: float) -> int:
        """Run one work item on every MoE device (receive → grouped GEMM → combine-send); returns result time."""
        c, m, exp, E = self.cfg.costs, self.cfg.model, self.exp, self.E
        g, step, layer, b = key
        loads = device_loads(self.rng, self.pop[layer], int(tokens) * m.top_k, E)
        launch = np.maximum(exp.host, t_avail - EXPERT_LAUNCH_LEAD_NS)
        exp.host = launch + 3 * self.launch_ns
        r_start = np.maximum(np.maximum(exp.free[SEND_STREAM], t_avail), launch + self.lat)
        r_end = r_start + self.kc.linear_ns(c.recv_c0, c.recv_c1, loads)
        exp.free[SEND_STREAM] = r_end
        g_start = np.maximum(np.maximum(exp.free[COMPUTE_STREAM], r_end), launch + self.launch_ns + self.lat)
        noise = jitter(self.rng, c.jitter, E) * self.slow[exp.ranks]
        g_end = g_start + np.rint(self.kc.moe_ns(loads) * noise).astype(np.int64)
        exp.free[COMPUTE_STREAM] = g_end
        s_start = np.maximum(np.maximum(exp.free[RECV_STREAM], g_end), launch + 2 * self.launch_ns + self.lat)
        # a balanced device sends back (tokens / T) token-equivalents, like one attention member's dispatch
        s_dur = self.kc.combine_ns((loads / m.top_k) * (E / self.T))
        s_end = s_start + np.rint(s_dur * self.out.slowdown(s_start)).astype(np.int64)
        self.out.place(s_start, s_end)
        exp.free[RECV_STREAM] = s_end
        bk = self.builder
        bk.kernels(
            exp.ranks, "dispatch_recv", SEND_STREAM, r_start, r_end, launch, self.launch_ns, step, layer, b
        )
        bk.kernels(
            exp.ranks,
            "moe",
            COMPUTE_STREAM,
            g_start,
            g_end,
            launch + self.launch_ns,
            self.launch_ns,
            step,
            layer,
            b,
        )
        bk.kernels(
            exp.ranks,
            "combine_send",
            RECV_STREAM,
            s_start,
            s_end,
            launch + 2 * self.launch_ns,
            self.launch_ns,
            step,
            layer,
            b,
        )
        result = int(s_end.max()) + self.net
        args = {"step": step, "layer": layer, "micro_batch": b, "dp_group": g}
        for r in range(E):
            bk.annotations.append(
                Annotation(
                    int(exp.ranks[r]),
                    f"layer#{layer}",
                    int(r_start[r]),
                    int(s_end[r]),
                    int(launch[r]),
                    int(launch[r] + 3 * self.launch_ns),
                    args,
                )
            )
        _span(self.exp_spans, step, 0, r_start, s_end, launch, exp.host)
        for k, v in (
            ("group", g),
            ("step", step),
            ("layer", layer),
            ("micro_batch", b),
            ("available_ns", t_avail),
            ("result_ns", result),
            ("assignments", loads.tolist()),
            ("start_ns", r_start.tolist()),
            ("end_ns", s_end.tolist()),
        ):
            self.items[k].append(v)
        return result

    def run(self) -> dict[str, Any]:
        gens = {g: self.group_program(g) for g in range(self.cfg.deployment.attn_dp)}
        waiting: dict[ItemKey, int] = {}
        now = [0]

        def advance(g: int, value: int | None) -> None:
            while True:
                try:
                    key = gens[g].send(value)
                except StopIteration:
                    return
                if isinstance(key, list):  # a send's members: the engine places them at their starts
                    self.outbox += [replace(d, t_ns=max(d.t_ns, now[0])) for d in key]
                    return
                if key not in self.results:
                    waiting[key] = g
                    return
                value = self.results[key]

        def handle(ev: Event) -> list[Event]:
            now[0] = ev.t_ns
            if isinstance(ev, DieSends):
                if (slow := self.links.started(ev)) is not None:  # the send's last member placed
                    advance(ev.group, slow)
                return self._sent()
            # the MoE devices serve items in the engine's (arrival time, send order) order
            assert isinstance(ev, ItemAvailable)
            self.results[ev.key] = self.serve(ev.key, ev.t_ns, ev.tokens)
            if ev.key in waiting:
                advance(waiting.pop(ev.key), self.results[ev.key])
            return self._sent()

        for g in gens:
            advance(g, None)
        Engine().run(handle, self._sent())
        for (step, _), (lo, hi, hlo, hhi) in sorted(self.exp_spans.items()):
            for r in range(self.E):
                self.builder.annotations.append(
                    Annotation(
                        int(self.exp.ranks[r]),
                        f"prefill_step#{step}",
                        int(lo[r]),
                        int(hi[r]),
                        int(hlo[r]),
                        int(hhi[r]),
                        {"step": step},
                    )
                )
        self.steps_truth.sort(key=lambda t: (t["step"], t["dp_group"]))
        stalls = {k: _flat(v) for k, v in self.stalls.items()}
        return {
            "waits": self.waits,
            "steps": self.steps_truth,
            "expert_items": self.items,
            "attention_stalls": stalls,
        }


def simulate_disaggregated(
    cfg: SynthConfig,
    reqs: Requests,
    plans: list[StepPlan],
    rng: np.random.Generator,
    builder: TimelineBuilder,
) -> dict[str, Any]:
    """Fill ``builder`` with the run's kernels and annotations; returns the truth parts it knows."""
    return _Sim(cfg, reqs, plans, rng, builder).run()


def _flat(chunks: list) -> list[int]:
    out: list[int] = []
    for c in chunks:
        out.extend(int(v) for v in (c.tolist() if isinstance(c, np.ndarray) else c))
    return out


def _span(
    spans: dict, layer: int, b: int, start: np.ndarray, end: np.ndarray, hlo: np.ndarray, hhi: np.ndarray
) -> None:
    sp = spans.get((layer, b))
    if sp is None:
        spans[(layer, b)] = [start, end, hlo, hhi]
    else:
        sp[0], sp[1] = np.minimum(sp[0], start), np.maximum(sp[1], end)
        sp[2], sp[3] = np.minimum(sp[2], hlo), np.maximum(sp[3], hhi)


def _annotate_group(builder: TimelineBuilder, reqs: Requests, st: _GroupStep, host_end: np.ndarray) -> None:
    idx = sorted(int(i) for part in st.slots for i in part)
    args = {
        "step": st.plan.step,
        "dp_group": st.g,
        **reqs.batch_args(idx),
    }
    ranks = st.dev.ranks
    for j, r in enumerate(ranks):
        builder.annotations.append(
            Annotation(
                int(r),
                f"prefill_step#{st.plan.step}",
                int(st.first[j]),
                int(st.last[j]),
                int(st.t0[j]),
                int(host_end[j]),
                args,
            )
        )
    st.spans.emit(builder, ranks, st.plan.step)
