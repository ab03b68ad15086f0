"""Lockstep (coupled) mechanics: every collective instance is a barrier over its ranks.

A coupled step is a chain of collective instances (:class:`~asaptrace.replay.mechanics.work.StepChain`).
For instance k (in release order) and rank r taking part::

    arrival[k, r] = max(end[ref[k, r], r], arrival[ref2[k, r], r]) + gap[k, r]   (own work since then)
    release[k]    = max over r of arrival[k, r]          (the barrier: last arrival)
    end[k, r]     = release[k] + tail[k, r]              (transfer after the barrier)
    wait[k, r]    = release[k] − arrival[k, r]

and the rank's step ends ``end_tail[r]`` after its last reference (and never before the end of any
of its own collectives). Replaying a measured chain with
its own gaps and tails reproduces the measured arrivals and ends exactly (up to the clock
residual folded into the tails); what-ifs change gaps (balanced attention, moved experts) or
tails (k_s). The loop runs over instances and is vectorised over ranks — a lockstep step needs
no event queue.

:func:`chain_from_costs` builds the chain of one step from per-layer costs (one micro-batch:
attention → dispatch barrier → MoE → combine barrier), which is how a deployment that was never
measured (the online sweep's Default, chunked sub-steps, hand-worked tests) is run.

Both cost builders take the kernel-level dependencies of the coupled program
(:class:`KernelDeps`), each off by default (the chains above, which the consistency checks
rely on): dense first layers without barriers, the shared expert beside the dispatch, the host
blocked on the dispatch, host launch cost and latency. Any of them on, the step becomes the
coupled kernel program (:func:`asaptrace.replay.mechanics.program.coupled_program`, one position per
kernel, each stream running one kernel at a time), the same program synth's traces are timed
on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from asaptrace.replay.mechanics.program import ProgramShape, coupled_program
from asaptrace.replay.mechanics.work import StepChain


@dataclass(frozen=True)
class ChainTimes:
    """Replayed times of one chain: (K, R) arrival and end, (K,) release, (R,) step start/end.

    For a kernel program (``chain.kernels``): ``arrival`` is each kernel's start, ``launch`` its
    host launch time (K, R) and ``host_end`` (R,) when each host finished launching (or waiting).
    """

    chain: StepChain
    arrival: np.ndarray
    release: np.ndarray
    end: np.ndarray
    start: np.ndarray
    step_end: np.ndarray
    launch: np.ndarray | None = None
    host_end: np.ndarray | None = None

    @property
    def makespan_ns(self) -> int:
        return int(self.step_end.max() - self.start.min())

    @property
    def wait_ns(self) -> np.ndarray:
        """(K, R) barrier wait (0 where the rank does not take part, and at local kernels)."""
        part = self.chain.part
        if self.chain.kernels is not None:
            part = part & self.chain.kernels.barrier[:, None]
        return np.where(part, self.release[:, None] - self.arrival, 0)


def run_chain(chain: StepChain, *, start: np.ndarray | None = None) -> ChainTimes:
    """Replay one step's chain (see the module docstring); ``start`` shifts the ranks' step starts.

    A kernel program (``chain.kernels``, :class:`~asaptrace.replay.mechanics.work.ChainKernels`) adds,
    per position k and rank r: the stream's previous kernel (``after``) bounds the start as
    ``ref`` does; the host launches k at ``launch[k, r]`` (one launch every ``launch_ns``, after a
    ``sync`` position only once it has ended) and k starts no earlier than ``launch[k, r]`` +
    ``launch_latency_ns``; a local (non-``barrier``) kernel ends at its own start + ``tail``.
    """
    k_n, r_n = chain.gap.shape
    s = np.asarray(chain.start if start is None else start, np.int64)
    arrival = np.zeros((k_n, r_n), np.int64)
    end = np.zeros((k_n, r_n), np.int64)
    release = np.zeros(k_n, np.int64)
    cols = np.arange(r_n)
    lo = np.iinfo(np.int64).min
    ref2 = chain.ref2
    kn = chain.kernels
    launch = np.zeros((k_n, r_n), np.int64) if kn is not None else None
    host = s.copy()
    # rows where every rank counts from the same position and takes part (cost-built chains): the
    # same rule on row views, without the per-rank gathers
    uniform = (chain.ref == chain.ref[:, :1]).all(axis=1) if r_n else np.zeros(k_n, bool)
    everyone = chain.part.all(axis=1)
    for k in range(k_n):
        ref = chain.ref[k]
        if uniform[k]:
            base = end[ref[0]] if ref[0] >= 0 else s
        else:
            base = np.where(ref >= 0, end[np.maximum(ref, 0), cols], s)
        if ref2 is not None:
            r2 = ref2[k]
            base = np.where(r2 >= 0, np.maximum(base, arrival[np.maximum(r2, 0), cols]), base)
        barrier = True
        if kn is not None:
            if kn.after[k] >= 0:
                base = np.maximum(base, end[kn.after[k]])
            launch[k] = host
            host = host + kn.launch_ns
            base = np.maximum(base, launch[k] + kn.launch_latency_ns)
            barrier = bool(kn.barrier[k])
        a = base + chain.gap[k]
        if everyone[k]:
            rel = int(a.max())
            arrival[k] = a
            end[k] = (rel if barrier else a) + chain.tail[k]
        else:
            part = chain.part[k]
            rel = int(np.where(part, a, lo).max())
            arrival[k] = np.where(part, a, 0)
            end[k] = np.where(part, (rel if barrier else a) + chain.tail[k], 0)
        release[k] = rel
        if kn is not None and kn.sync[k]:
            host = np.maximum(host, end[k])
    er = chain.end_ref
    last = end[np.maximum(er, 0), cols] if k_n else s
    step_end = np.where(er >= 0, last, s) + chain.end_tail
    if k_n:  # a rank's step never ends before one of its own collectives (two micro-batches: combine A
        # can end after combine B, the chain's last instance, when A's transfer is the longer)
        step_end = np.maximum(step_end, np.where(chain.part, end, lo).max(axis=0))
    host_end = host if kn is not None else None
    return ChainTimes(chain, arrival, release, end, s, step_end, launch, host_end)


def scale_transfers(chain: StepChain, k_s: float) -> StepChain:
    """The chain with every collective's transfer scaled by ``k_s`` (tails grow by (k_s − 1)·x)."""
    if k_s == 1.0:
        return chain
    extra = np.rint((k_s - 1.0) * chain.transfer).astype(np.int64)
    return replace(chain, tail=np.where(chain.part, chain.tail + extra[:, None], 0))


@dataclass(frozen=True)
class KernelDeps:
    """The kernel-level dependencies a cost-built chain can add (all off: the instance chain).

    ``dense_layers``: the first layers run attention + their FFN (``moe_ns`` of the layer, a dense
    MLP) with no dispatch or combine (off: every layer has both barriers, as DOMAIN §6 counts the
    dense layers as MoE). ``shared_ns`` ((R, L) or (L,), with a leading micro-batch axis for two):
    the shared expert, on the compute stream after attention while the dispatch transfers.
    ``host_blocking``: the host waits for each dispatch to end before launching anything else
    (DeepEP's normal dispatch reads the received counts). ``launch_ns``: host time per kernel
    launch; ``launch_latency_ns``: launch → earliest kernel start.
    """

    dense_layers: int = 0
    shared_ns: np.ndarray | None = None
    host_blocking: bool = False
    launch_ns: int = 0
    launch_latency_ns: int = 0

    @property
    def on(self) -> bool:
        """Whether any dependency is on (the step is then the kernel program)."""
        deps = (self.dense_layers, self.shared_ns is not None, self.host_blocking, self.launch_ns)
        return any(deps) or bool(self.launch_latency_ns)


NO_DEPS = KernelDeps()


def _program_chain(
    attn: np.ndarray,
    moe: np.ndarray,
    dispatch_ns: np.ndarray,
    combine_ns: np.ndarray,
    deps: KernelDeps,
    *,
    tp: int,
    step: int,
    start_ns: int,
) -> StepChain:
    """The coupled kernel program from (M, G, L) attention, (M, R, L) MoE, (M, L) transfers."""
    m_n, g_n, l_n = attn.shape
    r_n = g_n * tp
    group = np.arange(r_n) // tp
    shared = None
    if deps.shared_ns is not None:
        sh = np.asarray(deps.shared_ns, np.int64)
        sh = sh if m_n > 1 else sh[None]
        shared = np.broadcast_to(sh[:, None, :] if sh.ndim == 2 else sh, (m_n, r_n, l_n))
    disp = np.asarray(dispatch_ns, np.int64).reshape(m_n, l_n)
    comb = np.asarray(combine_ns, np.int64).reshape(m_n, l_n)

    def cost(op: str, layer: int, mb: int) -> np.ndarray | int:
        if op == "attention":
            return attn[mb][group, layer]
        if op in ("moe", "dense_mlp"):
            return moe[mb][:, layer]
        if op == "shared_expert" and shared is not None:
            return shared[mb][:, layer]
        return int((disp if op == "dispatch" else comb)[mb][layer])

    shape = ProgramShape(
        layers=l_n,
        micro_batches=m_n,
        dense_layers=deps.dense_layers,
        host_blocking=deps.host_blocking,
        shared_expert=shared is not None,
        launch_ns=deps.launch_ns,
        launch_latency_ns=deps.launch_latency_ns,
    )
    return coupled_program(shape, cost, ranks=r_n, step=step, start_ns=start_ns)


def chain_from_costs_two_mb(
    attention_ns: np.ndarray,
    moe_ns: np.ndarray,
    dispatch_ns: np.ndarray,
    combine_ns: np.ndarray,
    *,
    tp: int,
    step: int = 0,
    start_ns: int = 0,
    deps: KernelDeps = NO_DEPS,
) -> StepChain:
    """Two micro-batches A, B overlapped DeepSeek-style: arrays with a leading micro-batch axis of 2.

    The compute stream runs attention A, attention B, MoE A, MoE B per layer; each collective
    waits for its own micro-batch's previous one (``ref``) and the compute stream for the work
    before it (``ref2``: the arrival that ended it). Order of instances per layer: dA, dB, cA, cB.
    With ``deps`` on, the coupled kernel program instead (see the module docstring).
    """
    attn = np.asarray(attention_ns, np.int64)
    _, g_n, l_n = attn.shape
    r_n = g_n * tp
    moe = np.asarray(moe_ns, np.int64)
    moe = np.broadcast_to(moe[:, None, :], (2, r_n, l_n)) if moe.ndim == 2 else moe
    if deps.on:
        return _program_chain(attn, moe, dispatch_ns, combine_ns, deps, tp=tp, step=step, start_ns=start_ns)
    k_n = 4 * l_n
    gap = np.zeros((k_n, r_n), np.int64)
    ref = np.zeros((k_n, r_n), np.int64)
    ref2 = np.zeros((k_n, r_n), np.int64)
    tail = np.zeros((k_n, r_n), np.int64)
    transfer = np.zeros(k_n, np.int64)
    group = np.arange(r_n) // tp
    for layer in range(l_n):
        da, db, ca, cb = (4 * layer + i for i in range(4))
        prev_ca, prev_cb = da - 2, da - 1  # this micro-batch's combine of the layer before
        for k, mb, own, compute_before, cost in (
            (da, 0, prev_ca if layer else -1, prev_cb if layer else -1, attn[0][group, layer]),
            (db, 1, prev_cb if layer else -1, da, attn[1][group, layer]),
            (ca, 0, da, db, moe[0][:, layer]),
            (cb, 1, db, ca, moe[1][:, layer]),
        ):
            gap[k], ref[k], ref2[k] = cost, own, compute_before
            x = int((dispatch_ns if k in (da, db) else combine_ns)[mb][layer])
            tail[k] = transfer[k] = x
    kinds = ["dispatch", "dispatch", "combine", "combine"] * l_n
    mbs = np.tile(np.array([0, 1, 0, 1]), l_n)
    return _costed_chain(
        step, kinds, np.repeat(np.arange(l_n), 4), mbs, gap, ref, tail, transfer, start_ns, ref2
    )


def chain_from_costs(
    attention_ns: np.ndarray,
    moe_ns: np.ndarray,
    dispatch_ns: np.ndarray,
    combine_ns: np.ndarray,
    *,
    tp: int,
    step: int = 0,
    start_ns: int = 0,
    deps: KernelDeps = NO_DEPS,
) -> StepChain:
    """The lockstep chain of one step from costs.

    ``attention_ns`` (G, L): each DP group's local work before layer l's dispatch; ``moe_ns``
    (G·tp, L) or (L,): each rank's expert work before layer l's combine; ``dispatch_ns`` and
    ``combine_ns`` (L,): transfer after each barrier. Ranks are numbered group-major (rank r is in
    group r // tp). A layer with dispatch and combine both 0 and no MoE still has its barriers
    (unless ``deps.dense_layers`` says it is dense). With ``deps`` on, the coupled kernel program.
    """
    attn = np.asarray(attention_ns, np.int64)
    g_n, l_n = attn.shape
    r_n = g_n * tp
    moe = np.asarray(moe_ns, np.int64)
    moe = np.broadcast_to(moe, (r_n, l_n)) if moe.ndim == 1 else moe
    if deps.on:
        return _program_chain(
            attn[None], moe[None], dispatch_ns, combine_ns, deps, tp=tp, step=step, start_ns=start_ns
        )
    k_n = 2 * l_n
    gap = np.zeros((k_n, r_n), np.int64)
    ref = np.zeros((k_n, r_n), np.int64)
    tail = np.zeros((k_n, r_n), np.int64)
    transfer = np.zeros(k_n, np.int64)
    group = np.arange(r_n) // tp
    for layer in range(l_n):
        d, c = 2 * layer, 2 * layer + 1
        gap[d] = attn[group, layer]
        ref[d] = c - 2 if layer else -1
        tail[d] = transfer[d] = int(dispatch_ns[layer])
        gap[c] = moe[:, layer]
        ref[c] = d
        tail[c] = transfer[c] = int(combine_ns[layer])
    kinds = ["dispatch", "combine"] * l_n
    mbs = np.zeros(k_n, np.int64)
    return _costed_chain(step, kinds, np.repeat(np.arange(l_n), 2), mbs, gap, ref, tail, transfer, start_ns)


def _costed_chain(
    step: int,
    kind: list[str],
    layer: np.ndarray,
    micro_batch: np.ndarray,
    gap: np.ndarray,
    ref: np.ndarray,
    tail: np.ndarray,
    transfer: np.ndarray,
    start_ns: int,
    ref2: np.ndarray | None = None,
) -> StepChain:
    """A chain built from costs: every rank takes part in every instance, all start at ``start_ns``,
    each step ends with its last instance, and there is nothing measured to compare with."""
    k_n, r_n = gap.shape
    zeros = np.zeros((k_n, r_n), np.int64)
    return StepChain(
        step=step,
        ranks=np.arange(r_n),
        kind=kind,
        layer=layer,
        micro_batch=micro_batch,
        part=np.ones((k_n, r_n), bool),
        gap=gap,
        ref=ref,
        tail=tail,
        transfer=transfer,
        start=np.full(r_n, start_ns, np.int64),
        end_ref=np.full(r_n, k_n - 1, np.int64),
        end_tail=np.zeros(r_n, np.int64),
        measured_arrival=zeros,
        measured_end=zeros,
        ref2=ref2,
    )
