"""Pipelined (disaggregated, asynchronous) mechanics on the event engine: ASAP and AFD ping-pong.

The deployment: ``groups`` attention groups, each with ``slots`` batch slots sharing one compute
queue (first come, first served), and one MoE pool serving (batch, layer) items one at a time,
FIFO, from any group and any layer. Per layer a batch goes::

    attention (its group's compute) → dispatch latency → MoE pool → combine latency → next layer

with no barrier: a group proceeds as soon as its own combine is back. Mechanisms, each a field of
:class:`PipelineConfig`:

* ``slots`` — 2 = dual-batch interleaving (one batch's attention hides the other's
  dispatch/MoE/combine); a batch marked ``alone`` (a prompt above the length threshold) takes
  every slot of an idle group;
* ``buffer_slots`` — back-pressure: at most this many items sit in (or are served from) the pool's
  receive buffer; a dispatch that finds it full waits at the sender until an item leaves;
* ``overlap`` — off: the pool also serialises its share of the communication,
  ``comm_share·(dispatch + combine)`` per item (DOMAIN.md §6: (T/E)·(dispatch + combine));
* ``launch_ns`` — host launch overhead added to every MoE item (0 with the layer-oblivious
  super kernel).

**Batch formation is a hook** (:class:`BatchFormer`): the pipeline calls
``former.next_batch(now_ns, group, group_idle)`` whenever a group has a free slot (least occupied
group first), and re-tries at every time ``former.wakeups()`` names. The offline replay's former
hands out the store's measured batches, placed on groups up front (:class:`StaticBatches`); the online serving
sweep's former cuts batches from a queue of arrived requests (≥ 2K tokens, ≤ 32K) and computes
their per-layer costs with :func:`batch_costs`. The pipeline records spans (attention, dispatch,
MoE, combine per batch and layer) in a :class:`PipelineTrace`; the engine writes nothing.

**Two engines, one semantics.** :class:`Pipeline` (handlers on :class:`~asaptrace.replay.engine.Engine`)
is the reference; ``_pkernel`` (C, ``_pkernel.c``) runs the same loop ≈ 20× faster — same events,
same heap key and seq order, same int64 arithmetic, calling the former exactly where the reference
does — and the tests compare the two span for span. :func:`run_pipeline` uses the kernel when it
was built (``engine="python"`` or ``ASAPTRACE_PIPELINE_ENGINE=python`` picks the reference; the
install falls back to it silently when no compiler was there, as the Kineto scanner does).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import numpy as np

from asaptrace.errors import AccountingError, UsageError
from asaptrace.replay.costs import CostModel
from asaptrace.replay.engine import Engine, Event

try:
    from asaptrace.replay import _pkernel
except ImportError:  # not built (no compiler at install time): the Python engine runs every pipeline
    _pkernel = None

#: environment override of the engine: "python" (the reference), "c" (the kernel, or an error), "auto"
ENGINE_ENV = "ASAPTRACE_PIPELINE_ENGINE"
ENGINES = ("auto", "c", "python")


@dataclass(frozen=True)
class Batch:
    """One batch's work: per-layer costs (int64 ns arrays of equal length L).

    ``moe_ns[l] == 0`` marks a dense layer (no pool item: the MLP is in ``attention_ns``).
    ``key`` is what the former wants back in the results (e.g. (step, dp_group, micro_batch)).
    """

    batch_id: int
    ready_ns: int
    attention_ns: np.ndarray
    dispatch_ns: np.ndarray
    moe_ns: np.ndarray
    combine_ns: np.ndarray
    alone: bool = False
    step: int = 0
    key: tuple = ()

    @property
    def layers(self) -> int:
        return len(self.attention_ns)


class BatchFormer(Protocol):
    """The batch-formation hook (see the module docstring)."""

    def wakeups(self) -> Iterable[int]: ...

    def fresh(self) -> BatchFormer:
        """The same former before any batch was handed out (a policy may simulate several runs)."""
        ...

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | None: ...


@dataclass
class StaticBatches:
    """Offline former: pre-built batches, each placed on a group up front, FIFO per group.

    Placement is decided before the run — given (``placement``: batch id → group, e.g. the groups
    a :class:`FifoBatches` run chose, so that an ablation replays the same schedule with longer
    items) or step by step, longest attention work first onto the group with the least placed
    work (:func:`~asaptrace.replay.planner.place_longest_first`). A batch marked ``alone`` waits
    until its group is idle.
    """

    batches: list[Batch]
    groups: int = 1
    placement: dict[int, int] | None = None
    _queues: list[deque[Batch]] = field(init=False)

    def __post_init__(self) -> None:
        from asaptrace.replay.planner import place_longest_first

        self._queues = [deque() for _ in range(self.groups)]
        order = sorted(self.batches, key=lambda b: (b.ready_ns, b.batch_id))
        if self.placement is not None:
            for b in order:
                self._queues[self.placement[b.batch_id]].append(b)
            return
        by_step: dict[int, list[Batch]] = {}
        for b in order:
            by_step.setdefault(b.ready_ns, []).append(b)
        load = np.zeros(self.groups)
        for ready in sorted(by_step):
            step = by_step[ready]
            where = place_longest_first([float(b.attention_ns.sum()) for b in step], self.groups, load=load)
            for b, g in zip(step, where, strict=True):
                self._queues[int(g)].append(b)

    def wakeups(self) -> Iterable[int]:
        return sorted({b.ready_ns for b in self.batches})

    def fresh(self) -> StaticBatches:
        """The same former, before any batch was handed out (for another run)."""
        return StaticBatches(self.batches, self.groups, self.placement)

    def placed(self, group_of: dict[int, int]) -> StaticBatches:
        return StaticBatches(self.batches, self.groups, dict(group_of))

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | None:
        q = self._queues[group]
        if not q or q[0].ready_ns > now_ns or (q[0].alone and not group_idle):
            return None
        return q.popleft()


@dataclass
class FifoBatches:
    """Offline former of DOMAIN §7: pre-built batches handed out FIFO (ready time, then id) to
    whichever group asks — the pipeline asks the least-occupied group with a free slot first. A
    batch holding a long prompt (``alone``) is reserved for the group that asked and handed out
    when that group is idle (as the online former does)."""

    batches: list[Batch]
    groups: int = 1
    _queue: deque[Batch] = field(init=False)
    _reserved: dict[int, Batch] = field(init=False)

    def __post_init__(self) -> None:
        self._queue = deque(sorted(self.batches, key=lambda b: (b.ready_ns, b.batch_id)))
        self._reserved = {}

    def wakeups(self) -> Iterable[int]:
        return sorted({b.ready_ns for b in self.batches})

    def fresh(self) -> FifoBatches:
        return FifoBatches(self.batches, self.groups)

    def placed(self, group_of: dict[int, int]) -> StaticBatches:
        """The schedule a run chose, fixed (for a replay in the same service order)."""
        return StaticBatches(self.batches, self.groups, dict(group_of))

    def next_batch(self, now_ns: int, group: int, group_idle: bool) -> Batch | None:
        if group in self._reserved:
            return self._reserved.pop(group) if group_idle else None
        if not self._queue or self._queue[0].ready_ns > now_ns:
            return None
        b = self._queue.popleft()
        if b.alone and not group_idle:
            self._reserved[group] = b
            return None
        return b


@dataclass(frozen=True)
class PipelineConfig:
    groups: int
    slots: int = 2
    buffer_slots: int = 64
    overlap: bool = True
    comm_share: float = 0.25  # (T / E): the pool dies' share of the communication, when not overlapped
    launch_ns: int = 0


@dataclass
class PipelineTrace:
    """What a pipeline run did, per (batch, layer) span; filled by :class:`Pipeline`."""

    attention: list[tuple[int, int, int, int, int]] = field(
        default_factory=list
    )  # batch, group, layer, t0, t1
    dispatch: list[tuple[int, int, int, int]] = field(default_factory=list)  # batch, layer, t0, t1
    moe: list[tuple[int, int, int, int]] = field(default_factory=list)
    combine: list[tuple[int, int, int, int]] = field(default_factory=list)
    done: dict[int, int] = field(default_factory=dict)  # batch → completion time
    group_of: dict[int, int] = field(default_factory=dict)
    slot_of: dict[int, int] = field(default_factory=dict)
    events: int = 0
    slots: int = 0  # slots per group the run used


# ------------------------------------------------------------------------------------------ events
@dataclass(frozen=True)
class Wakeup(Event):
    priority: ClassVar[int] = 40


@dataclass(frozen=True)
class AttentionReady(Event):
    batch: int
    layer: int
    priority: ClassVar[int] = 20


@dataclass(frozen=True)
class AttentionDone(Event):
    batch: int
    layer: int
    priority: ClassVar[int] = 10


@dataclass(frozen=True)
class PoolArrive(Event):
    batch: int
    layer: int
    priority: ClassVar[int] = 20


@dataclass(frozen=True)
class PoolDone(Event):
    batch: int
    layer: int
    priority: ClassVar[int] = 10


@dataclass(frozen=True)
class BatchDone(Event):
    batch: int
    priority: ClassVar[int] = 5


@dataclass(frozen=True)
class ServiceOrder:
    """The order in which each group's compute and the pool served (batch, layer) items."""

    compute: dict[int, list[tuple[int, int]]]
    pool: list[tuple[int, int]]

    @classmethod
    def of(cls, trace: PipelineTrace) -> ServiceOrder:
        compute: dict[int, list[tuple[int, int]]] = {}
        for b, g, layer, _t0, _t1 in sorted(trace.attention, key=lambda r: (r[3], r[1])):
            compute.setdefault(g, []).append((b, layer))
        pool = [(b, layer) for b, layer, _t0, _t1 in sorted(trace.moe, key=lambda r: r[2])]
        return cls(compute, pool)


class _Queue:
    """FIFO of ready items, or — with a fixed order — the items in that order, each when ready."""

    def __init__(self, order: list[tuple[int, int]] | None) -> None:
        self.fifo: deque[tuple[int, int]] = deque()
        self.order = order
        self.ready: set[tuple[int, int]] = set()
        self.next = 0

    def put(self, item: tuple[int, int]) -> None:
        if self.order is None:
            self.fifo.append(item)
        else:
            self.ready.add(item)

    def take(self) -> tuple[int, int] | None:
        if self.order is None:
            return self.fifo.popleft() if self.fifo else None
        if self.next < len(self.order) and self.order[self.next] in self.ready:
            item = self.order[self.next]
            self.ready.discard(item)
            self.next += 1
            return item
        return None


class Pipeline:
    """The bookkeeping of one pipelined run (queues, slots, the pool); handlers return follow-ups.

    With ``order`` (a :class:`ServiceOrder` of an earlier run) every resource serves its items in
    that order instead of first come, first served: the run is then a max-plus system of fixed
    order, in which longer items can only delay completions (no scheduling anomaly). Ablations
    that only lengthen items (no super kernel, no overlap) are replayed this way.
    """

    def __init__(
        self, config: PipelineConfig, former: BatchFormer, order: ServiceOrder | None = None
    ) -> None:
        self.cfg = config
        self.former = former
        self.trace = PipelineTrace()
        self.batches: dict[int, Batch] = {}
        self.used = [0] * config.groups  # slots in use per group
        self.free_slots = [list(range(config.slots)) for _ in range(config.groups)]
        self.compute_busy = [False] * config.groups
        self.compute_queue = [
            _Queue(None if order is None else order.compute.get(g, [])) for g in range(config.groups)
        ]
        self.pool_busy = False
        self.pool_queue = _Queue(None if order is None else order.pool)
        self.pool_held = 0  # items in the pool's buffer (queued or in service)
        self.blocked: deque[tuple[int, int, int]] = deque()
        self._handlers = {
            AttentionDone: self._attention_done,
            AttentionReady: self._attention_ready,
            PoolArrive: self._pool_arrive,
            PoolDone: self._pool_done,
            BatchDone: self._batch_done,
            Wakeup: self._wakeup,
        }  # dispatches waiting for a buffer slot

    def run(self) -> PipelineTrace:
        wakeups = list(self.former.wakeups())
        engine = Engine(start_ns=min(0, *wakeups) if wakeups else 0)
        engine.run(self.handle, [Wakeup(t) for t in wakeups])
        self.trace.events = engine.handled
        self.trace.slots = self.cfg.slots
        stuck = [b for b in self.batches if b not in self.trace.done]
        if stuck:
            raise AccountingError(f"pipeline stalled with {len(stuck)} batches unfinished: a bug")
        return self.trace

    def handle(self, ev: Event) -> Iterator[Event]:
        return self._handlers[type(ev)](ev)

    def _attention_ready(self, ev: AttentionReady) -> Iterator[Event]:
        g = self.trace.group_of[ev.batch]
        self.compute_queue[g].put((ev.batch, ev.layer))
        yield from self._start_compute(g, ev.t_ns)

    def _pool_arrive(self, ev: PoolArrive) -> Iterator[Event]:
        self.pool_queue.put((ev.batch, ev.layer))
        yield from self._start_pool(ev.t_ns)

    def _batch_done(self, ev: BatchDone) -> Iterator[Event]:
        b = self.batches[ev.batch]
        g = self.trace.group_of[ev.batch]
        self.trace.done[ev.batch] = ev.t_ns
        self.used[g] -= self.cfg.slots if b.alone else 1
        self.free_slots[g].extend(range(self.cfg.slots) if b.alone else [self.trace.slot_of[ev.batch]])
        yield from self._assign(ev.t_ns)

    def _wakeup(self, ev: Wakeup) -> Iterator[Event]:
        yield from self._assign(ev.t_ns)

    # ------------------------------------------------------------------------------- handlers
    def _assign(self, t: int) -> Iterator[Event]:
        """Fill free slots, least occupied group first, with batches from the former."""
        while True:
            order = sorted((u, g) for g, u in enumerate(self.used) if u < self.cfg.slots)
            placed = False
            for _, g in order:
                b = self.former.next_batch(t, g, self.used[g] == 0)
                if b is None:
                    continue
                self.batches[b.batch_id] = b
                self.trace.group_of[b.batch_id] = g
                if b.alone:
                    self.used[g] = self.cfg.slots
                    self.trace.slot_of[b.batch_id] = 0
                    self.free_slots[g] = []
                else:
                    self.used[g] += 1
                    self.free_slots[g].sort()
                    self.trace.slot_of[b.batch_id] = self.free_slots[g].pop(0)
                yield AttentionReady(t, batch=b.batch_id, layer=0)
                placed = True
                break
            if not placed:
                return

    def _start_compute(self, g: int, t: int) -> Iterator[Event]:
        if self.compute_busy[g]:
            return
        item = self.compute_queue[g].take()
        if item is None:
            return
        bid, layer = item
        self.compute_busy[g] = True
        end = t + int(self.batches[bid].attention_ns[layer])
        self.trace.attention.append((bid, g, layer, t, end))
        yield AttentionDone(end, batch=bid, layer=layer)

    def _attention_done(self, ev: AttentionDone) -> Iterator[Event]:
        g = self.trace.group_of[ev.batch]
        self.compute_busy[g] = False
        yield from self._start_compute(g, ev.t_ns)
        b = self.batches[ev.batch]
        if b.moe_ns[ev.layer] > 0:
            arrive = ev.t_ns + int(b.dispatch_ns[ev.layer])
            self.trace.dispatch.append((ev.batch, ev.layer, ev.t_ns, arrive))
            if self.pool_held >= self.cfg.buffer_slots:
                self.blocked.append((ev.batch, ev.layer, arrive))  # back-pressure: the slot is still full
            else:
                self.pool_held += 1
                yield PoolArrive(arrive, batch=ev.batch, layer=ev.layer)
        else:
            yield from self._next_layer(b, ev.layer, ev.t_ns)

    def _start_pool(self, t: int) -> Iterator[Event]:
        if self.pool_busy:
            return
        item = self.pool_queue.take()
        if item is None:
            return
        bid, layer = item
        b = self.batches[bid]
        dur = int(b.moe_ns[layer]) + self.cfg.launch_ns
        if not self.cfg.overlap:
            dur += round(self.cfg.comm_share * (int(b.dispatch_ns[layer]) + int(b.combine_ns[layer])))
        self.pool_busy = True
        self.trace.moe.append((bid, layer, t, t + dur))
        yield PoolDone(t + dur, batch=bid, layer=layer)

    def _pool_done(self, ev: PoolDone) -> Iterator[Event]:
        self.pool_busy = False
        self.pool_held -= 1
        if self.blocked:
            bid, layer, arrive = self.blocked.popleft()  # the waiting sender writes into the freed slot
            self.pool_held += 1
            yield PoolArrive(max(arrive, ev.t_ns), batch=bid, layer=layer)
        yield from self._start_pool(ev.t_ns)
        b = self.batches[ev.batch]
        back = ev.t_ns + int(b.combine_ns[ev.layer])
        self.trace.combine.append((ev.batch, ev.layer, ev.t_ns, back))
        yield from self._next_layer(b, ev.layer, back)

    def _next_layer(self, b: Batch, layer: int, t: int) -> Iterator[Event]:
        if layer + 1 < b.layers:
            yield AttentionReady(t, batch=b.batch_id, layer=layer + 1)
        else:
            yield BatchDone(t, batch=b.batch_id)


def run_pipeline(
    config: PipelineConfig,
    former: BatchFormer,
    *,
    order: ServiceOrder | None = None,
    engine: str | None = None,
) -> PipelineTrace:
    """Run the pipelined deployment until every batch the former hands out is done.

    ``engine``: "auto" (default: the compiled kernel when built, else the Python reference), "c" or
    "python"; None reads ``ASAPTRACE_PIPELINE_ENGINE``. Both give the same trace, span for span.
    """
    return run_recorded(config, former, order=order, engine=engine)[0]


def kernel_available() -> bool:
    """Whether the compiled pipeline kernel (``_pkernel``) was built."""
    return _pkernel is not None


def run_recorded(
    config: PipelineConfig,
    former: BatchFormer,
    *,
    order: ServiceOrder | None = None,
    engine: str | None = None,
    spans: bool = True,
) -> tuple[PipelineTrace, dict[int, Batch]]:
    """:func:`run_pipeline`, also returning every batch the former handed out (by id, in hand-out
    order). ``spans=False`` leaves the trace's span lists empty (a serving sweep needs only the
    completion times; on the kernel, turning 4 spans per item into Python tuples costs about twice
    the run itself: 1.6–1.9 s against 0.4–0.6 s for one 300 s, 20/s ASAP point)."""
    if _pick_engine(engine, config) == "c":
        return _run_kernel(config, former, order, spans)
    pipeline = Pipeline(config, former, order)
    trace = pipeline.run()
    if not spans:
        trace.attention, trace.dispatch, trace.moe, trace.combine = [], [], [], []
    return trace, pipeline.batches


def _pick_engine(engine: str | None, config: PipelineConfig) -> str:
    choice = engine or os.environ.get(ENGINE_ENV) or "auto"
    if choice not in ENGINES:
        raise UsageError(
            f"pipeline engine must be one of {', '.join(ENGINES)}, not {choice!r} ({ENGINE_ENV})"
        )
    # the kernel's arithmetic is Python's for int ns and a double comm_share (not, say, float32)
    fits = all(isinstance(v, int | np.integer) for v in (config.launch_ns, config.buffer_slots))
    fits = fits and isinstance(config.comm_share, int | float) and config.groups >= 1
    if choice == "c" and (_pkernel is None or not fits):
        why = (
            "was not built"
            if _pkernel is None
            else "needs integer launch_ns, buffer_slots, a float comm_share and a group"
        )
        raise UsageError(f"the compiled pipeline engine {why}; use engine 'python' or 'auto'")
    if choice == "auto":
        return "c" if _pkernel is not None and fits else "python"
    return choice


def _as_ns(values: object) -> np.ndarray:
    """A batch's per-layer costs as the kernel reads them: int64 (non-integers truncate as int() does;
    a fractional MoE cost below 1 ns then counts as no pool item, where the reference would test
    the float — costs are int64 ns by contract, :class:`Batch`)."""
    return np.ascontiguousarray(values, dtype=np.int64)


def _pairs(items: list[tuple[int, int]]) -> bytes:
    return np.asarray(items, np.int64).reshape(-1, 2).tobytes()


def _rows(buf: bytes | None, width: int) -> list:
    if buf is None:
        return []
    cols = np.frombuffer(buf, np.int64).reshape(-1, width).T.tolist()
    return list(zip(*cols, strict=True))


def _run_kernel(
    cfg: PipelineConfig, former: BatchFormer, order: ServiceOrder | None, spans: bool
) -> tuple[PipelineTrace, dict[int, Batch]]:
    """The same run on the compiled kernel; its int64 buffers become the reference's trace."""
    if _pkernel is None:  # (_pick_engine chose "c" only when it was built)
        raise UsageError("the compiled pipeline engine was not built")
    wake = np.asarray(list(former.wakeups()))
    if wake.size and wake.dtype.kind not in "iu":
        raise UsageError(f"the batch former's wakeup times must be integer ns, not {wake.dtype}")
    wake = wake.astype(np.int64)
    seq = np.argsort(wake, kind="stable")  # the engine pushes them in this order: seq = position
    orders = None
    if order is not None:
        orders = ([_pairs(order.compute.get(g, [])) for g in range(cfg.groups)], _pairs(order.pool))
    ids, groups, slots, done_idx, done_t, handled, objs, attn, disp, moe, comb = _pkernel.run(
        cfg.groups,
        cfg.slots,
        cfg.buffer_slots,
        cfg.overlap,
        float(cfg.comm_share),
        cfg.launch_ns,
        wake[seq].tobytes(),
        seq.astype(np.int64).tobytes(),
        former,
        _as_ns,
        orders,
        spans,
    )
    id_arr = np.frombuffer(ids, np.int64)
    id_list = id_arr.tolist()
    trace = PipelineTrace(
        attention=_rows(attn, 5),
        dispatch=_rows(disp, 4),
        moe=_rows(moe, 4),
        combine=_rows(comb, 4),
        done=dict(
            zip(
                id_arr[np.frombuffer(done_idx, np.int64)].tolist(),
                np.frombuffer(done_t, np.int64).tolist(),
                strict=True,
            )
        ),
        group_of=dict(zip(id_list, np.frombuffer(groups, np.int64).tolist(), strict=True)),
        slot_of=dict(zip(id_list, np.frombuffer(slots, np.int64).tolist(), strict=True)),
        events=handled,
        slots=cfg.slots,
    )
    if len(trace.done) < len(id_list):
        raise AccountingError(
            f"pipeline stalled with {len(id_list) - len(trace.done)} batches unfinished: a bug"
        )
    return trace, dict(zip(id_list, objs, strict=True))


def batch_costs(
    costs: CostModel,
    new_tokens: np.ndarray,
    prefix: np.ndarray,
    *,
    layers: int,
    dense_layers: int,
    tp: int,
    experts: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-layer (attention, dispatch, moe, combine) ns of a batch of pieces, from the cost model.

    For formers that build batches from requests (the online sweep): attention on a TP group of
    ``tp`` dies (the cost model's one TP rule, × attn_tp_ref / tp), dispatch/combine of the batch's tokens per sending die, MoE of its tokens on the
    ``experts``-die pool; the first ``dense_layers`` layers have no pool item.
    """
    c = np.asarray(new_tokens, np.float64)
    attn = costs.attention_ns(c, prefix, tp=tp)
    tokens = float(c.sum())
    xfer = int(costs.transfer_ns(tokens / tp))
    moe = int(costs.moe_ns(tokens, experts))
    dense = min(max(dense_layers, 0), layers)
    disp = np.zeros(layers, np.int64)
    disp[dense:] = xfer
    pool = np.zeros(layers, np.int64)
    pool[dense:] = moe
    return np.full(layers, attn, np.int64), disp, pool, disp.copy()
