"""Running a pipeline: the Python reference (:class:`~asaptrace.replay.mechanics.pipelined.Pipeline`)
or the compiled item loop (``_pkernel.c``), one semantics.

:func:`run_pipeline` uses the kernel when it was built (``engine="python"`` or
``ASAPTRACE_PIPELINE_ENGINE=python`` picks the reference; the install falls back to it silently
when no compiler was there, as the Kineto scanner does). The kernel runs the same loop ≈ 20×
faster — same events, same heap key and seq order, same int64 arithmetic, calling the former
exactly where the reference does — and the tests compare the two span for span.

:func:`run_formed` runs the kernel with its compiled FIFO token former (:class:`TokenRule`: asap's
and afd-pingpong's built-in online formers) in place of a Python one: the same decisions in the
same order, Python asked only for the costs of a batch whose pieces it has not seen in the run.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from asaptrace.errors import AccountingError, UsageError
from asaptrace.replay.mechanics.formers import Batch, BatchFormer
from asaptrace.replay.mechanics.pipelined import Pipeline, PipelineConfig, PipelineTrace, ServiceOrder

try:
    from asaptrace.replay.mechanics import _pkernel
except ImportError:  # not built (no compiler at install time): the Python engine runs every pipeline
    _pkernel = None

#: environment override of the engine: "python" (the reference), "c" (the kernel, or an error), "auto"
ENGINE_ENV = "ASAPTRACE_PIPELINE_ENGINE"
ENGINES = ("auto", "c", "python")


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


def _config_args(cfg: PipelineConfig) -> tuple:
    """The kernel's first six arguments: the pipeline's shape and mechanisms."""
    return cfg.groups, cfg.slots, cfg.buffer_slots, cfg.overlap, float(cfg.comm_share), cfg.launch_ns


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
    # the formers allocate a few objects per batch and free none that form cycles: the cyclic
    # collector's passes over them were ~5 % of a serving run (perf); it runs again afterwards
    collecting = gc.isenabled()
    gc.disable()
    try:
        ids, groups, slots, done_idx, done_t, handled, objs, attn, disp, moe, comb = _pkernel.run(
            *_config_args(cfg),
            wake[seq].tobytes(),
            seq.astype(np.int64).tobytes(),
            former,
            _as_ns,
            orders,
            spans,
        )
    finally:
        if collecting:
            gc.enable()
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


@dataclass(frozen=True)
class TokenRule:
    """A FIFO token former the kernel runs itself: arrived requests queue in arrival order; a take
    holds them while it has < ``min_tokens`` new tokens and the next fits in ``max_tokens`` (the
    first always joins). ``micro_batches`` 0 (asap's
    :class:`~asaptrace.replay.policies.asap.AsapFormer`): a take is a batch, cut for any free slot;
    one with a prompt of more than ``long_tokens`` (None: never) runs alone, reserving a busy group
    until it is idle. ``micro_batches`` m ≥ 1 (afd-pingpong's
    :class:`~asaptrace.replay.policies.afd_pingpong.PingpongFormer`): a take is a step, cut when the
    stage is idle and nothing is pending, dealt longest-first by new tokens onto min(m, its
    requests) micro-batches handed out one per free slot. ``cost_of(pieces)``, pieces the batch's
    ((new, cached), ...), gives its 4 per-layer cost arrays (asked once per distinct pieces)."""

    arrival_ns: np.ndarray
    new_tokens: np.ndarray
    cached_len: np.ndarray
    min_tokens: int
    max_tokens: int
    long_tokens: int | None
    cost_of: Callable[[tuple[tuple[int, int], ...]], tuple]
    micro_batches: int = 0


@dataclass(frozen=True)
class FormedRun:
    """What a :func:`run_formed` run gives back, per batch id (in cut order) and per request."""

    done_ns: np.ndarray  # per batch: when its last layer was done
    start_ns: np.ndarray  # per request: its batch's hand-out (-1: never handed out)
    sizes: np.ndarray  # per batch: its request count
    reqs: np.ndarray  # the batches' requests, batch after batch (batch k: the next sizes[k])
    cost_index: np.ndarray  # per batch: its costs in ``costs``
    costs: list[tuple]  # ``cost_of``'s answers, each once
    #: per cost: its attention and rest totals, int64 (the kernel's sums of its copies, where
    #: ``exact``: the answer was int64 numpy arrays of one length; elsewhere 0)
    attention_total: np.ndarray
    rest_total: np.ndarray
    exact: np.ndarray
    events: int


def run_formed(cfg: PipelineConfig, rule: TokenRule, *, engine: str | None = None) -> FormedRun | None:
    """The pipeline run with the kernel's compiled former; None when the Python engine is picked
    (``engine`` as :func:`run_pipeline`'s): the caller then runs its Python former."""
    if _pick_engine(engine, cfg) != "c" or not hasattr(_pkernel, "run_formed"):  # (a kernel built before it)
        return None
    arrival, new, cached = (
        np.ascontiguousarray(a, np.int64) for a in (rule.arrival_ns, rule.new_tokens, rule.cached_len)
    )
    wake = np.unique(arrival)  # OnlineFormer.wakeups(): each arrival time once, in order
    ids, done_idx, done_t, handled, start, count, reqs, cost, costs, attn, rest, exact = _pkernel.run_formed(
        *_config_args(cfg),
        wake.tobytes(),
        np.arange(len(wake), dtype=np.int64).tobytes(),
        arrival.tobytes(),
        new.tobytes(),
        cached.tobytes(),
        rule.min_tokens,
        rule.max_tokens,
        rule.long_tokens is not None,
        0 if rule.long_tokens is None else rule.long_tokens,
        rule.micro_batches,
        rule.cost_of,
        _as_ns,
    )
    sizes = np.frombuffer(count, np.int64)
    done = np.full(len(sizes), -1, np.int64)
    done_at = np.frombuffer(done_idx, np.int64)
    done[np.frombuffer(ids, np.int64)[done_at]] = np.frombuffer(done_t, np.int64)
    if len(done_at) < len(sizes):
        raise AccountingError(f"pipeline stalled with {len(sizes) - len(done_at)} batches unfinished: a bug")
    return FormedRun(
        done_ns=done,
        start_ns=np.frombuffer(start, np.int64).copy(),
        sizes=sizes,
        reqs=np.frombuffer(reqs, np.int64),
        cost_index=np.frombuffer(cost, np.int64),
        costs=costs,
        attention_total=np.frombuffer(attn, np.int64),
        rest_total=np.frombuffer(rest, np.int64),
        exact=np.frombuffer(exact, np.int64).astype(bool),
        events=handled,
    )
