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
their per-layer costs with :func:`~asaptrace.replay.mechanics.formers.batch_costs`. The pipeline records spans (attention, dispatch,
MoE, combine per batch and layer) in a :class:`PipelineTrace`; the engine writes nothing.

**Two engines, one semantics.** :class:`Pipeline` (handlers on
:class:`~asaptrace.replay.mechanics.engine.Engine`) is the reference; the compiled item loop
(``_pkernel.c``) runs the same events; :mod:`~asaptrace.replay.mechanics.pipeline_run` picks one
(``run_pipeline``, ``run_recorded``). The formers and ``batch_costs`` live in
:mod:`~asaptrace.replay.mechanics.formers`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from asaptrace.errors import AccountingError
from asaptrace.replay.mechanics.engine import Engine, Event
from asaptrace.replay.mechanics.formers import Batch, BatchFormer


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
        self.quiet = -(1 << 63)  # the former said: no batch for any group before this time
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
        """Fill free slots, least occupied group first, with batches from the former. An int
        answer T > t (:class:`BatchFormer`: no batch for any group before T) ends the pass, and
        no group is asked again before T; a (batch, T) answer places the batch, then the same."""
        while t >= self.quiet:
            order = sorted((u, g) for g, u in enumerate(self.used) if u < self.cfg.slots)
            placed = False
            for _, g in order:
                b = self.former.next_batch(t, g, self.used[g] == 0)
                after = None
                if isinstance(b, tuple):  # (batch, T): this batch, then nothing for anyone before T
                    b, after = b
                if isinstance(b, int):
                    self.quiet = max(self.quiet, b)
                    if t < self.quiet:
                        return
                    continue
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
                if after is not None:
                    self.quiet = max(self.quiet, after)
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
