"""The coupled deployment's kernel program written as a lockstep chain (one kernel per position).

Every rank of a coupled step runs the same program. Per layer and micro-batch: attention; on an MoE
layer the router (``gate``) and the dispatch layout, the dispatch — a barrier; with
``count_exchange`` DeepEP's ``notify_dispatch`` (the barrier, exchanging per-expert counts) then
the payload — the shared expert (compute, while the dispatch transfers), the routed experts
(``moe``) and the combine (a barrier); on a dense layer attention and a dense MLP, with no
collective. With two micro-batches the program interleaves them DeepSeek-style: per layer, both
micro-batches up to their dispatch, then both MoE + combine, so one micro-batch's communication
(its own streams) overlaps the other's compute. Streams: compute, dispatch (the step's all-gather,
notify and dispatch) and combine.

:func:`coupled_program` writes the program as a :class:`~asaptrace.replay.mechanics.work.StepChain` with
:class:`~asaptrace.replay.mechanics.work.ChainKernels`; :func:`~asaptrace.replay.mechanics.lockstep.run_chain`
times it. The replay's cost-built lockstep steps with the kernel-level dependencies turned on
(:func:`~asaptrace.replay.mechanics.lockstep.chain_from_costs`) and synth's coupled timelines
(:mod:`asaptrace.synth.coupled`) are both this program on that one walk. :class:`ProgramShape`
says which kernels and dependencies it holds; every one is off by default.

Costs come from a callable ``cost(op, layer, micro_batch)`` called once per kernel *in launch
order*: (R,) ns durations for local kernels, one ns transfer for collectives. Calling it in program
order is what lets synth draw each kernel's noise in a fixed order (same seed → same files).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from asaptrace.replay.mechanics.work import ChainKernels, StepChain

COMPUTE_STREAM, DISPATCH_STREAM, COMBINE_STREAM = 7, 20, 21

#: ``cost(op, layer, micro_batch)``: (R,) durations of a local kernel, or a collective's transfer (ns)
KernelCost = Callable[[str, int, int], "np.ndarray | int"]


@dataclass(frozen=True)
class ProgramShape:
    """Which kernels and dependencies a coupled step's program holds (all off: attention →
    dispatch → MoE → combine per layer, every layer with both barriers, no host)."""

    layers: int
    micro_batches: int = 1
    #: the first layers run attention + a dense MLP (``dense_mlp``) with no collective
    dense_layers: int = 0
    #: the router's kernels (``gate``, ``layout``) between attention and the dispatch
    router: bool = False
    #: the dispatch's barrier is its count exchange (``notify``), the payload a second collective
    count_exchange: bool = False
    #: the host waits for the dispatch's barrier to end before it launches anything else
    host_blocking: bool = False
    #: the shared expert runs on the compute stream after the router, while the dispatch transfers
    shared_expert: bool = False
    #: a step-start all-gather (DP metadata) before the first layer
    step_collective: bool = False
    launch_ns: int = 0  # host time per kernel launch
    launch_latency_ns: int = 0  # launch → earliest kernel start


class _Positions:
    """The chain's positions in launch order; each stream's previous kernel remembered."""

    def __init__(self, ranks: int, cost: KernelCost) -> None:
        self.r_n, self.cost = ranks, cost
        self.op: list[str] = []
        self.kind: list[str] = []
        #: per position: stream, the stream's previous kernel, input, sync, layer, micro-batch, barrier
        self.cols: list[tuple[int, int, int, bool, int, int, bool]] = []
        self.tail: list[np.ndarray] = []
        self.transfer: list[int] = []
        self.last: dict[int, int] = {}

    def add(
        self, op: str, stream: int, dep: int, layer: int, mb: int, *, kind: str = "", sync: bool = False
    ) -> int:
        """One kernel; a collective (``kind`` given, or the payload after a count exchange) is a barrier."""
        k = len(self.op)
        barrier = bool(kind) or op == "dispatch"
        c = self.cost(op, layer, mb)
        self.op.append(op)
        self.kind.append(kind)
        self.cols.append((stream, self.last.get(stream, -1), dep, sync, layer, mb, barrier))
        self.last[stream] = k
        if barrier:
            self.transfer.append(int(c))
            self.tail.append(np.full(self.r_n, int(c), np.int64))
        else:
            self.transfer.append(0)
            self.tail.append(np.broadcast_to(np.asarray(c, np.int64), (self.r_n,)))
        return k


def coupled_program(
    shape: ProgramShape, cost: KernelCost, *, ranks: int, step: int = 0, start_ns: int | np.ndarray = 0
) -> StepChain:
    """The chain of one coupled step's kernel program (see the module docstring).

    ``start_ns``: each rank's step start (its host and streams are free from then), one value or (R,).
    """
    p = _Positions(ranks, cost)
    mbs = range(shape.micro_batches)
    ready = dict.fromkeys(mbs, -1)
    if shape.step_collective:
        ag = p.add("allgather", DISPATCH_STREAM, -1, -1, -1, kind="collective")
        ready = dict.fromkeys(mbs, ag)
    for layer in range(shape.layers):
        if layer < shape.dense_layers:
            for mb in mbs:
                a = p.add("attention", COMPUTE_STREAM, ready[mb], layer, mb)
                ready[mb] = p.add("dense_mlp", COMPUTE_STREAM, a, layer, mb)
            continue
        payload = {}
        for mb in mbs:
            routed = last = p.add("attention", COMPUTE_STREAM, ready[mb], layer, mb)
            if shape.router:
                routed = p.add("gate", COMPUTE_STREAM, last, layer, mb)
                last = p.add("layout", COMPUTE_STREAM, routed, layer, mb)
            if shape.count_exchange:
                nt = p.add(
                    "notify", DISPATCH_STREAM, last, layer, mb, kind="dispatch", sync=shape.host_blocking
                )
                payload[mb] = p.add("dispatch", DISPATCH_STREAM, nt, layer, mb)
            else:
                payload[mb] = p.add(
                    "dispatch", DISPATCH_STREAM, last, layer, mb, kind="dispatch", sync=shape.host_blocking
                )
            if shape.shared_expert:
                p.add("shared_expert", COMPUTE_STREAM, routed, layer, mb)
        for mb in mbs:
            m = p.add("moe", COMPUTE_STREAM, payload[mb], layer, mb)
            ready[mb] = p.add("combine", COMBINE_STREAM, m, layer, mb, kind="combine")
    return _chain(p, shape, step, start_ns)


def _chain(p: _Positions, shape: ProgramShape, step: int, start_ns: int | np.ndarray) -> StepChain:
    k_n, r_n = len(p.op), p.r_n
    cols = np.array(p.cols, np.int64).reshape(k_n, 7)
    zeros = np.zeros((k_n, r_n), np.int64)
    ref = np.broadcast_to(cols[:, 2:3], (k_n, r_n)).copy()
    return StepChain(
        step=step,
        ranks=np.arange(r_n),
        kind=p.kind,
        layer=cols[:, 4].copy(),
        micro_batch=cols[:, 5].copy(),
        part=np.ones((k_n, r_n), bool),
        gap=zeros,
        ref=ref,
        tail=np.stack(p.tail) if k_n else zeros,
        transfer=np.array(p.transfer, np.int64),
        start=np.broadcast_to(np.asarray(start_ns, np.int64), (r_n,)).copy(),
        end_ref=np.full(r_n, k_n - 1, np.int64),
        end_tail=np.zeros(r_n, np.int64),
        measured_arrival=zeros,
        measured_end=zeros,
        kernels=ChainKernels(
            op=p.op,
            stream=cols[:, 0].copy(),
            barrier=cols[:, 6].astype(bool),
            after=cols[:, 1].copy(),
            sync=cols[:, 3].astype(bool),
            launch_ns=int(shape.launch_ns),
            launch_latency_ns=int(shape.launch_latency_ns),
        ),
    )
