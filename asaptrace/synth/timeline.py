"""The simulated run, before any file format: per-rank kernels, annotations and ground truth.

The execution models (:mod:`~asaptrace.synth.coupled`, :mod:`~asaptrace.synth.disaggregated`) fill a
:class:`TimelineBuilder` on the *true* clock (int64 ns from the run's time 0); writers turn the
finished :class:`Timeline` into Kineto or Ascend files, adding each rank's clock offset. Keeping
this layer format-free is what lets one run be written in both formats with identical timing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from asaptrace.replay.mechanics.program import COMBINE_STREAM, DISPATCH_STREAM

#: Operation codes of kernels (the writers map them to format-specific names).
OPS: tuple[str, ...] = (
    "attention",
    "gate",
    "layout",
    "shared_expert",
    "dense_mlp",
    "moe",
    "notify",
    "dispatch",
    "combine",
    "allgather",
    "dispatch_send",
    "dispatch_recv",
    "combine_send",
    "combine_recv",
)
OP_CODE: dict[str, int] = {name: i for i, name in enumerate(OPS)}
#: Operations that run on a communication stream.
COMM_OPS = frozenset(
    {
        "notify",
        "dispatch",
        "combine",
        "allgather",
        "dispatch_send",
        "dispatch_recv",
        "combine_send",
        "combine_recv",
    }
)

COMM_STREAMS = (DISPATCH_STREAM, COMBINE_STREAM)


@dataclass(frozen=True)
class RankMeta:
    rank: int
    role: str  # fused | attention | expert
    dp_group: int | None
    tp_index: int | None
    ep_index: int | None
    node: int
    device: int  # local device id on its node


@dataclass
class Timeline:
    """Everything the writers need, on the true clock (ns)."""

    ranks: list[RankMeta]
    world_size: int
    clock_offset_ns: np.ndarray  # (R,) int64, added to every timestamp rank r writes
    epoch_ns: int
    # kernels, one row each (columns of equal length)
    k_rank: np.ndarray
    k_op: np.ndarray
    k_stream: np.ndarray
    k_start: np.ndarray
    k_dur: np.ndarray
    k_launch: np.ndarray  # host time of the launch call
    k_launch_dur: np.ndarray
    k_step: np.ndarray
    k_layer: np.ndarray  # -1: none
    k_mb: np.ndarray  # -1: none
    # annotations (step and layer spans), one row each
    annotations: list[Annotation]
    truth: dict[str, Any]

    @property
    def kernel_count(self) -> int:
        return len(self.k_rank)

    def by_rank(self) -> Iterator[tuple[int, np.ndarray, list[Annotation]]]:
        """Per rank: (rank, its kernel rows sorted by start, its annotations) — what a writer renders."""
        order = np.lexsort((self.k_start, self.k_rank))
        bounds = np.searchsorted(self.k_rank[order], np.arange(self.world_size + 1))
        anns: dict[int, list[Annotation]] = {}
        for a in self.annotations:
            anns.setdefault(a.rank, []).append(a)
        for r in range(self.world_size):
            yield r, order[bounds[r] : bounds[r + 1]], anns.get(r, [])


@dataclass(frozen=True)
class Annotation:
    rank: int
    name: str
    dev_start: int
    dev_end: int
    host_start: int
    host_end: int
    args: dict[str, Any]


def written_args(args: dict[str, Any], epoch_ns: int, reference_offset_ns: int) -> dict[str, Any]:
    """An annotation's args as a trace carries them: request arrivals stamped on the clock of the
    reference rank (rank 0), absolute ns like the trace's timestamps.

    A serving front-end logs arrivals on one host's clock, not on each device's; rank 0's is the
    clock every rank is aligned to on ingest, so arrival and step end meet on one clock and
    TTFT = step end − arrival needs no per-rank correction.
    """
    if "arrivals_ns" not in args:
        return args
    shift = epoch_ns + reference_offset_ns
    return {**args, "arrivals_ns": [a + shift for a in args["arrivals_ns"]]}


@dataclass
class TimelineBuilder:
    """Collects kernel rows in vectorised chunks (one chunk per op over many ranks)."""

    chunks: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    annotations: list[Annotation] = field(default_factory=list)

    def kernels(
        self,
        ranks: np.ndarray,
        op: str,
        stream: int,
        start: np.ndarray,
        end: np.ndarray,
        launch: np.ndarray,
        launch_dur: int,
        step: int,
        layer: int = -1,
        mb: int = -1,
    ) -> None:
        n = len(ranks)
        self.chunks.append(
            (
                np.asarray(ranks, np.int32),
                np.full(n, OP_CODE[op], np.int8),
                np.full(n, stream, np.int16),
                np.asarray(start, np.int64),
                np.asarray(end - start, np.int64),
                np.asarray(launch, np.int64),
                np.full(n, launch_dur, np.int64),
                np.full(n, step, np.int32),
                np.full(n, layer, np.int16),
                np.full(n, mb, np.int8),
            )
        )

    def build(
        self, ranks: list[RankMeta], offsets: np.ndarray, epoch_ns: int, truth: dict[str, Any]
    ) -> Timeline:
        cols = (
            [np.concatenate([c[i] for c in self.chunks]) for i in range(10)]
            if self.chunks
            else [
                np.zeros(0, t)
                for t in (np.int32, np.int8, np.int16, *[np.int64] * 4, np.int32, np.int16, np.int8)
            ]
        )
        if (cols[4] < 0).any():
            raise AssertionError("negative kernel duration: execution model bug")
        return Timeline(
            ranks=ranks,
            world_size=len(ranks),
            clock_offset_ns=np.asarray(offsets, np.int64),
            epoch_ns=epoch_ns,
            k_rank=cols[0],
            k_op=cols[1],
            k_stream=cols[2],
            k_start=cols[3],
            k_dur=cols[4],
            k_launch=cols[5],
            k_launch_dur=cols[6],
            k_step=cols[7],
            k_layer=cols[8],
            k_mb=cols[9],
            annotations=self.annotations,
            truth=truth,
        )


def ms(x: float | np.ndarray) -> Any:
    """ms → int64 ns (vectorised)."""
    return np.rint(np.asarray(x, np.float64) * 1e6).astype(np.int64)


def jitter(rng: np.random.Generator, sigma: float, n: int) -> np.ndarray:
    """Multiplicative kernel-time noise with mean 1."""
    if sigma <= 0:
        return np.ones(n)
    return rng.lognormal(-sigma * sigma / 2, sigma, n)


def expert_popularity(
    rng: np.random.Generator, experts: int, layers: int, cv: float, hot: int, hot_factor: float
) -> np.ndarray:
    """(layers, experts) routing probabilities: per-layer skew, one expert optionally hot."""
    if cv > 0:
        k = 1.0 / (cv * cv)
        w = rng.gamma(k, 1.0 / k, (layers, experts))
    else:
        w = np.ones((layers, experts))
    if hot >= 0:
        w[:, hot] *= hot_factor
    return w / w.sum(axis=1, keepdims=True)


def device_loads(rng: np.random.Generator, p: np.ndarray, assignments: int, devices: int) -> np.ndarray:
    """(token, expert) assignments landing on each expert device (experts split contiguously)."""
    counts = rng.multinomial(int(assignments), p) if assignments > 0 else np.zeros(len(p), np.int64)
    return counts.reshape(devices, -1).sum(axis=1)


#: Operations whose kernels get an enclosing annotation naming them: a GEMM's name does not say
#: whose GEMM it is, the annotation it runs under does (the taxonomy's context rules read it).
CONTEXT_OPS = frozenset({"shared_expert", "dense_mlp"})


class SpanRecorder:
    """Layer spans of a set of ranks as *contiguous runs* of the program, plus context spans.

    With two micro-batches the program alternates them, so one (layer, micro-batch) is launched in
    several separate runs; each run becomes its own ``layer#L`` span, so host spans nest properly
    (as ``record_function`` ranges on one thread must) instead of overlapping.
    """

    def __init__(self) -> None:
        self.runs: list[list] = []  # [layer, mb, dev_lo, dev_hi, host_lo, host_hi]
        self.context: list[tuple] = []  # (name, layer, mb, dev_lo, dev_hi, host_lo, host_hi)

    def add(
        self,
        op: str,
        layer: int,
        mb: int,
        start: np.ndarray,
        end: np.ndarray,
        hlo: np.ndarray,
        hhi: np.ndarray,
    ) -> None:
        last = self.runs[-1] if self.runs else None
        if last is not None and last[0] == layer and last[1] == mb:
            last[2], last[3] = np.minimum(last[2], start), np.maximum(last[3], end)
            last[4], last[5] = np.minimum(last[4], hlo), np.maximum(last[5], hhi)
        else:
            self.runs.append([layer, mb, start, end, hlo, hhi])
        if op in CONTEXT_OPS:
            self.context.append((op, layer, mb, start, end, hlo, hhi))

    def extend_device(self, layer: int, mb: int, start: np.ndarray, end: np.ndarray) -> None:
        """A kernel launched in an earlier run of (layer, mb) whose timing is known only now."""
        for run in reversed(self.runs):
            if run[0] == layer and run[1] == mb:
                run[2], run[3] = np.minimum(run[2], start), np.maximum(run[3], end)
                return

    def emit(self, builder: TimelineBuilder, ranks: np.ndarray, step: int) -> None:
        for layer, mb, lo, hi, hlo, hhi in self.runs:
            args = {"step": step, "layer": int(layer), "micro_batch": int(mb)}
            for j, r in enumerate(ranks.tolist()):
                builder.annotations.append(
                    Annotation(r, f"layer#{layer}", int(lo[j]), int(hi[j]), int(hlo[j]), int(hhi[j]), args)
                )
        for name, layer, mb, lo, hi, hlo, hhi in self.context:
            args = {"step": step, "layer": int(layer), "micro_batch": int(mb)}
            for j, r in enumerate(ranks.tolist()):
                builder.annotations.append(
                    Annotation(r, name, int(lo[j]), int(hi[j]), int(hlo[j]), int(hhi[j]), args)
                )
