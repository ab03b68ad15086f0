"""Segmentation without annotations: steps from idle gaps, layers from the dispatch/combine order.

Rules 4 and 5 of :mod:`asaptrace.enrich.segment`, for ranks whose annotations said nothing (or that
have none). They need final kinds (a kernel must be known as dispatch, combine or compute), so they
run after classification, whereas the annotation rules run before it. The step cut is decided over
*all* step-less ranks (:class:`StepPlan`) so that a streaming enrichment can fill one rank at a time
and still cut every rank alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from asaptrace.enrich.comm_layers import layers_from_comm_order
from asaptrace.enrich.segment import SegmentNotes
from asaptrace.schema import Kind
from asaptrace.units import plural, text_ns

DEFAULT_MIN_STEP_GAP_NS = 1_000_000
_DEVICE_WORK = pl.col("is_device") & (pl.col("kind").cast(pl.String) != Kind.ANNOTATION)


@dataclass(frozen=True)
class StepPlan:
    """How ranks without step annotations are cut into steps — decided over *all* such ranks.

    The idle-gap threshold is ``max(min_gap, 20 × median gap)`` over every step-less rank, and the
    cut is kept only when those ranks agree on the number of boundaries. Computing it from the
    per-rank gaps (:func:`step_gaps`) lets a streaming enrichment fill one rank at a time.
    """

    threshold: int
    boundaries: tuple[int, ...]  # distinct boundary counts over the step-less ranks

    @property
    def consistent(self) -> bool:
        return len(self.boundaries) <= 1


def ranks_without(events: pl.DataFrame, column: str) -> pl.Series:
    """Ranks whose device work has no value at all in ``column`` (step or layer)."""
    return (
        events.filter(_DEVICE_WORK)
        .group_by("rank")
        .agg(pl.col(column).is_not_null().any().alias("has"))
        .filter(~pl.col("has"))
        .get_column("rank")
    )


def step_gaps(events: pl.DataFrame, ranks: pl.Series) -> pl.DataFrame:
    """Idle gap before each device kernel of ``ranks`` (rows: _row, rank, ts_ns, dur_ns, _gap)."""
    dev = (
        events.with_row_index("_row")
        .filter(pl.col("rank").is_in(ranks.implode()) & _DEVICE_WORK)
        .select("_row", "rank", "ts_ns", "dur_ns")
        .sort("rank", "ts_ns")
    )
    return dev.with_columns(
        _prev_end=(pl.col("ts_ns") + pl.col("dur_ns")).cum_max().shift(1).over("rank"),
    ).with_columns(_gap=(pl.col("ts_ns") - pl.col("_prev_end")).clip(lower_bound=0))


def cut_steps(dev: pl.DataFrame, threshold: int) -> pl.Series:
    """The step of each kernel of ``dev`` (rank, ts_ns, dur_ns, _gap; sorted by rank and ts_ns) cut
    at idle gaps longer than ``threshold``. A cut that leaves a step shorter than the rank's longest
    kernel is not a step boundary (a lone 4 µs kernel before a long idle gap is not a step beside
    10 ms ones): such a step joins the next one (the last step: the one before)."""
    keys = ["rank", "_raw"]
    cut = dev.select("rank", "ts_ns", "dur_ns", "_gap").with_columns(
        _raw=(pl.col("_gap").fill_null(0) > threshold).cast(pl.Int32).cum_sum().over("rank")
    )
    per = (
        cut.group_by(keys, maintain_order=True)
        .agg(
            ((pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()).alias("_span"),
            pl.col("dur_ns").max().alias("_dur"),
        )
        .sort(keys)
        .with_columns(_keep=(pl.col("_span") >= pl.col("_dur").max().over("rank")).cast(pl.Int32))
        .with_columns(
            _new=(pl.col("_keep").cum_sum().over("rank") - pl.col("_keep")).clip(
                upper_bound=(pl.col("_keep").sum().over("rank") - 1).clip(lower_bound=0)
            )
        )
    )
    return cut.join(per.select(*keys, "_new"), on=keys, how="left", maintain_order="left").get_column("_new")


def plan_steps(gaps: pl.DataFrame, min_gap: int = DEFAULT_MIN_STEP_GAP_NS) -> StepPlan:
    """The :class:`StepPlan` of the step-less ranks whose gaps are in ``gaps`` (rank, ts_ns,
    dur_ns, _gap: :func:`step_gaps`)."""
    positive = gaps.filter(pl.col("_gap") > 0).get_column("_gap")
    threshold = max(min_gap, int(20 * positive.median())) if positive.len() else min_gap  # type: ignore[operator]
    counts = (
        gaps.select("rank", cut_steps(gaps, threshold).alias("_s"))
        .group_by("rank")
        .agg(pl.col("_s").max().alias("n"))
        .get_column("n")
        .unique()
    )
    return StepPlan(threshold=threshold, boundaries=tuple(sorted(int(c) for c in counts.to_list())))


def same_cut(gaps: pl.DataFrame, a: StepPlan, b: StepPlan) -> bool:
    """Whether :func:`fill_steps` cuts the ranks whose gaps are ``gaps`` (rank, _gap) into the
    same steps by plan ``a`` as by plan ``b``: every gap on the same side of both thresholds
    (an inconsistent plan cuts nothing)."""
    gap = gaps.get_column("_gap").fill_null(0)
    none = pl.repeat(False, gap.len(), eager=True)
    a_cuts = gap > a.threshold if a.consistent else none
    b_cuts = gap > b.threshold if b.consistent else none
    return bool((a_cuts == b_cuts).all())


def note_steps(notes: SegmentNotes, plan: StepPlan) -> None:
    """Record in ``notes`` what cutting by ``plan`` did (once per enrichment, not per rank)."""
    if not plan.consistent:
        notes.notes.append(
            f"steps could not be told apart from idle gaps (ranks disagree: {list(plan.boundaries)} boundaries); "
            "all events without a step annotation were put in step 0"
        )
        notes.step_source = notes.step_source if notes.step_source == "annotations" else "single"
        return
    n = plan.boundaries[0] + 1 if plan.boundaries else 1
    notes.step_source = (
        notes.step_source if notes.step_source == "annotations" else ("gaps" if n > 1 else "single")
    )
    if n > 1:
        notes.notes.append(
            f"{plural(n, 'step')} found from idle gaps longer than {text_ns(plan.threshold)} "
            "(no step annotations; a cut only where no device work runs on any stream)"
        )


def fill_steps(events: pl.DataFrame, ranks: pl.Series, plan: StepPlan) -> pl.DataFrame:
    """Steps of ``ranks``' device work from idle gaps longer than the plan's threshold."""
    dev = step_gaps(events, ranks)
    if plan.consistent:
        dev = dev.with_columns(_step=cut_steps(dev, plan.threshold).cast(pl.Int32))
    else:
        dev = dev.with_columns(_step=pl.lit(0, pl.Int32))
    fill = np.full(events.height, -1, dtype=np.int64)
    fill[dev.get_column("_row").to_numpy()] = dev.get_column("_step").to_numpy()
    fill_s = pl.Series(fill).cast(pl.Int32)
    # host events of those ranks: no step (their timeline is not the device's)
    return events.with_columns(step=pl.when(fill_s >= 0).then(fill_s).otherwise(pl.col("step")))


def fill_from_structure(
    events: pl.DataFrame,
    notes: SegmentNotes,
    *,
    min_step_gap_ns: int = DEFAULT_MIN_STEP_GAP_NS,
    plan: StepPlan | None = None,
    note_plan: bool = True,
) -> pl.DataFrame:
    """Steps from gaps and layers from dispatch/combine order where annotations said nothing.

    Needs final kinds. Only ranks with no step (layer) annotations at all are filled, so a trace
    with annotations is never second-guessed. ``plan`` (decided over all ranks, see
    :class:`StepPlan`) is computed from ``events`` when not given; ``note_plan=False`` leaves the
    step note to the caller that decided the plan.
    """
    ev = events
    without_steps = ranks_without(ev, "step")
    if without_steps.len():
        plan = plan or plan_steps(step_gaps(ev, without_steps), min_step_gap_ns)
        if note_plan:
            note_steps(notes, plan)
        ev = fill_steps(ev, without_steps, plan)
    without_layers = ranks_without(ev, "layer")
    if without_layers.len():
        layered = layers_from_comm_order(ev, without_layers)
        if layered is not None:
            note_layers(notes)
            ev = layered
    return ev


def note_layers(notes: SegmentNotes) -> None:
    """Record that layers were numbered from the dispatch/combine order."""
    notes.layer_source = notes.layer_source if notes.layer_source == "annotations" else "comm_order"
    notes.notes.append(
        "layers numbered from the order of dispatch/combine kernels (no layer annotations): "
        "layer k is the k-th MoE layer of the step, micro-batches unknown"
    )
