"""Segmentation: the step, layer and micro-batch of every event.

From annotations when the trace has them, in this order of trust:

1. **The annotation tree.** Annotation spans (``user_annotation`` / ``gpu_user_annotation``) of one
   (rank, pid, stream) nest; a span's own step/layer/micro-batch come from its args (the ``extra``
   JSON of the args table: ``step``, ``layer``, ``micro_batch``) or its name (the taxonomy's
   ``step_annotations`` / ``layer_annotations`` patterns, e.g. ``prefill_step#3``, ``layer#17``),
   and what a span lacks it inherits from its ancestors. ``ProfilerStep#N`` of any category is a
   step span (an ``Operator`` or ``cpu_op`` so named becomes an annotation); a serving framework's
   step spans outrank a ``ProfilerStep#N`` on their rank; a device copy of a step span is its
   step (:mod:`asaptrace.enrich.step_links`).
2. **Host events** take the values of their innermost enclosing host span.
3. **Device events** take the values of the host launch that shares their correlation id (the
   kernel belongs to the layer that launched it, even when two micro-batches overlap on two
   streams); failing that, of the innermost device span on their own stream; failing that, the
   profiler's own step id (Ascend ``kernel_details.csv``'s ``Step Id``); failing that, unlinked
   work the step whose device work runs when it starts, else the step of the step span that
   contains them (a kernel: its launch) on their rank.

Without annotations (or for what they leave unassigned), once kinds are known —
:mod:`asaptrace.enrich.structure` (:func:`~asaptrace.enrich.structure.fill_from_structure`):

4. **Steps from gaps** (a rank with no step annotation nor step id at all): a rank's device
   timeline is cut where no work runs on any stream for longer than
   ``max(min_step_gap_ns, 20 × median gap)``, so a cut never runs through a kernel. When ranks
   disagree on the number of steps, all events go to step 0 and the note says so.
5. **Layers from the order of dispatch/combine**: within a (rank, step), the k-th run of
   dispatch kernels and the combine run after it form MoE layer k (counted from 0 among MoE layers,
   not the model's layer id); a compute kernel belongs to layer k when k combine runs ended before
   it started; events after the last combine have no layer. Micro-batches stay unknown.

The annotation context (names of the enclosing spans, from outermost to innermost, digits
replaced by ``N``) is returned alongside, for taxonomy rules that depend on it.

This module does rules 1–3 (what the annotations say) and holds :class:`SegmentNotes`, which both
halves fill.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import polars as pl

from asaptrace.enrich.step_links import device_window_steps, mirrors, step_ids, step_named_host
from asaptrace.enrich.taxonomy import Taxonomy
from asaptrace.schema import Kind

_EXTRA_DTYPE = pl.Struct({"step": pl.Int64, "layer": pl.Int64, "micro_batch": pl.Int64})
_DIGITS = re.compile(r"\d+")
_MAX_DEPTH = 64


@dataclass
class SegmentNotes:
    """What segmentation did, for meta.json and the Diagnosis."""

    step_source: str = "none"  # annotations | gaps | single
    layer_source: str = "none"  # annotations | comm_order | none
    notes: list[str] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)  # the steps table (asaptrace.enrich.phases)

    def to_json(self) -> dict:
        return {
            "step_source": self.step_source,
            "layer_source": self.layer_source,
            "notes": self.notes,
            "steps": self.steps,
        }


def annotation_spans(events: pl.DataFrame, args: pl.DataFrame, taxonomy: Taxonomy) -> pl.DataFrame:
    """Annotation spans with their own and inherited step/layer/micro-batch and their context path.

    Columns: rank, pid, stream, is_device, eid, name, ts_ns, end_ns, parent (row index or -1),
    step, layer, micro_batch (effective, nullable), own_step, is_step_span, is_layer_span, context.
    """
    ann = events.filter(pl.col("kind").cast(pl.String) == Kind.ANNOTATION).select(
        "rank",
        "pid",
        "stream",
        "is_device",
        "eid",
        pl.col("name").cast(pl.String),
        "ts_ns",
        (pl.col("ts_ns") + pl.col("dur_ns")).alias("end_ns"),
    )
    extra = (
        args.filter(pl.col("extra").is_not_null())
        .select("rank", "eid", pl.col("extra").str.json_decode(_EXTRA_DTYPE).alias("x"))
        .unnest("x")
        .rename({"step": "arg_step", "layer": "arg_layer", "micro_batch": "arg_mb"})
    )
    ann = ann.join(extra, on=["rank", "eid"], how="left")
    names = ann.get_column("name").unique().to_list()
    parsed = pl.DataFrame(
        [_parse_name(n, taxonomy) for n in names],
        schema={
            "name": pl.String,
            "name_step": pl.Int64,
            "name_is_step": pl.Boolean,
            "name_layer": pl.Int64,
            "name_rule": pl.Boolean,
        },
        orient="row",
    )
    ann = ann.join(parsed, on="name", how="left")
    # a serving framework's own step spans come first: a ProfilerStep#N around them on their rank
    # (a profiler schedule over a serving loop) is no step, or it would make its steps one
    outranked = ~pl.col("name_rule") & pl.col("name_rule").any().over("rank")
    ann = ann.with_columns(
        is_layer_span=pl.col("arg_layer").is_not_null() | pl.col("name_layer").is_not_null(),
        name_is_step=pl.col("name_is_step") & ~outranked,
        name_step=pl.when(outranked).then(None).otherwise(pl.col("name_step")),
    ).with_columns(
        is_step_span=(pl.col("name_is_step") | (pl.col("arg_step").is_not_null() & ~pl.col("is_layer_span"))),
        own_layer=pl.coalesce("arg_layer", "name_layer"),
        own_mb=pl.col("arg_mb"),
    )
    ann = ann.with_columns(own_step=pl.coalesce("arg_step", "name_step")).sort(
        ["rank", "pid", "stream", "ts_ns", "end_ns"], descending=[False, False, False, False, True]
    )
    return _build_tree(ann, mirrors(ann, args))


def _parse_name(name: str, taxonomy: Taxonomy) -> tuple[str, int | None, bool, int | None, bool]:
    """(name, its step number, whether it names a step, its layer, whether a ``[[step]]`` rule
    read it: a serving framework's step rather than ``ProfilerStep#N``)."""
    step, is_step, layer = None, False, None
    for rule in taxonomy.step_rules:  # a serving framework's step (its phase: asaptrace.enrich.phases)
        m = rule.match.search(name)
        if m:
            found = m.groupdict().get("step")
            return name, None if found is None else int(found), True, None, True
    for pat in taxonomy.step_annotations:
        m = pat.search(name)
        if m:
            is_step = True
            step = int(m.group(1)) if m.groups() and m.group(1) is not None else None
            break
    for pat in taxonomy.layer_annotations:
        m = pat.search(name)
        if m and m.groups():
            layer = int(m.group(1))
            break
    return name, step, is_step, layer, False


def _build_tree(ann: pl.DataFrame, mirror: np.ndarray) -> pl.DataFrame:
    """Parent links by a stack walk per (rank, pid, stream); values inherited from ancestors.

    A step span inside another step span (SGLang's ``step[EXTEND …]`` inside an ``execute_…``
    span) is part of that step. Step spans named without a number (vLLM's ``execute_…``) that are
    inside no other step span are numbered by their order on the rank's host; a device copy of one
    (``mirror``: the row of the host span it copies, :func:`~asaptrace.enrich.step_links.mirrors`)
    is that span's step, one without a host span is numbered by its order on its stream."""
    n = ann.height
    grp = (
        ann.select(pl.struct("rank", "pid", "stream").rank("dense")).to_series().to_numpy()
        if n
        else np.zeros(0)
    )
    start = ann.get_column("ts_ns").to_numpy()
    end = ann.get_column("end_ns").to_numpy()
    names_s = ann.get_column("name")
    short = {n: _DIGITS.sub("N", n) for n in names_s.unique().to_list()}
    names = names_s.replace_strict(short, return_dtype=pl.String).to_list() if n else []
    is_step = ann.get_column("is_step_span").fill_null(False).to_list()
    parent = np.full(n, -1, dtype=np.int64)
    under_step = np.zeros(n, dtype=bool)  # some ancestor is a step span
    context: list[str] = [""] * n
    stack: list[int] = []
    current = None
    for i in range(n):
        if grp[i] != current:
            stack.clear()
            current = grp[i]
        while stack and end[stack[-1]] <= start[i] and not (end[stack[-1]] == start[stack[-1]] == start[i]):
            stack.pop()
        p = stack[-1] if stack else -1
        parent[i] = p
        if p >= 0:
            under_step[i] = under_step[p] or is_step[p]
            context[i] = f"{context[p]}/{names[i]}"
        else:
            context[i] = names[i]
        stack.append(i)
    linked = pl.Series(mirror >= 0)
    # host spans by their order on the rank; device ones without a host span by theirs on a stream
    where = [pl.col("rank"), pl.col("is_device"), pl.col("_top")]
    where += [pl.when(pl.col("is_device")).then(pl.col(c)) for c in ("pid", "stream")]
    ordinal = (pl.col("ts_ns").rank("ordinal").over(where) - 1).cast(pl.Int64)
    own = (
        ann.with_columns(_top=pl.Series(~under_step) & pl.col("is_step_span").fill_null(False) & ~linked)
        .select(
            pl.when(pl.col("own_step").is_null() & pl.col("_top")).then(ordinal).otherwise(pl.col("own_step"))
        )
        .to_series()
        .to_list()
    )
    own_layer, own_mb = ann.get_column("own_layer").to_list(), ann.get_column("own_mb").to_list()
    step: list[int | None] = [None] * n
    layer: list[int | None] = [None] * n
    mb: list[int | None] = [None] * n
    on_device = ann.get_column("is_device").to_numpy()
    # parents come before their children; host spans before the device spans that copy them
    for i in np.concatenate([np.flatnonzero(~on_device), np.flatnonzero(on_device)]).tolist():
        if mirror[i] >= 0:
            own[i] = step[mirror[i]]
        p = parent[i]
        if p >= 0:
            step[i] = own[i] if own[i] is not None else step[p]
            layer[i] = own_layer[i] if own_layer[i] is not None else layer[p]
            mb[i] = own_mb[i] if own_mb[i] is not None else mb[p]
        else:
            step[i], layer[i], mb[i] = own[i], own_layer[i], own_mb[i]
        if own[i] is None and is_step[i]:
            own[i] = step[i]  # a nested step span: its step is its ancestor's
    return ann.with_columns(
        own_step=pl.Series(own, dtype=pl.Int64),
        parent=pl.Series(parent, dtype=pl.Int64),
        step=pl.Series(step, dtype=pl.Int64),
        layer=pl.Series(layer, dtype=pl.Int64),
        micro_batch=pl.Series(mb, dtype=pl.Int64),
        context=pl.Series(context, dtype=pl.String),
    ).with_row_index("span")


def innermost(
    points: pl.DataFrame, spans: pl.DataFrame, device: bool, by: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Id (``span``) of the innermost host (device) span with the same ``by`` keys containing each
    point's ts_ns. ``points`` needs ``by`` + ts_ns + a row id ``_row``; returns (``_row``, span or -1).
    """
    subset = spans.filter(pl.col("is_device") == device)
    if points.height == 0 or subset.height == 0:
        return points.get_column("_row").to_numpy(), np.full(points.height, -1, dtype=np.int64)
    left = points.select([*by, "ts_ns", "_row"]).sort("ts_ns")
    # among spans starting together the inner one comes later in tree order; asof takes the last
    right = subset.select([*by, pl.col("ts_ns").alias("_start"), "span"]).sort("_start", "span")
    hit = left.join_asof(
        right, left_on="ts_ns", right_on="_start", by=by, strategy="backward", check_sortedness=False
    )
    rows = hit.get_column("_row").to_numpy()
    idx = hit.get_column("span").fill_null(-1).to_numpy().astype(np.int64)
    ts = hit.get_column("ts_ns").to_numpy()
    span_start = spans.get_column("ts_ns").to_numpy()
    span_end = spans.get_column("end_ns").to_numpy()
    parent = spans.get_column("parent").to_numpy()
    for _ in range(_MAX_DEPTH):
        ok = idx >= 0
        safe = np.where(ok, idx, 0)
        inside = (ts < span_end[safe]) | (ts == span_start[safe])
        walk = ok & ~inside
        if not walk.any():
            break
        idx[walk] = parent[idx[walk]]
    return rows, idx


class OutsideRows(Protocol):
    """Host rows of the same ranks kept out of ``events`` (a big rank's host chunks,
    :mod:`asaptrace.enrich.host_chunks`): what the kernels they launched need of them."""

    def launches(self, spans: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(rank, corr, eid, _span) of the rows with a correlation id inside a span, and
        (rank, corr, _launch) the earliest start of the rows with each correlation id."""
        ...


def segment(
    events: pl.DataFrame,
    args: pl.DataFrame,
    taxonomy: Taxonomy,
    outside: OutsideRows | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, SegmentNotes]:
    """Fill step/layer/micro_batch from annotations; add a ``context`` column (enclosing span names).

    Returns (events with step/layer/micro_batch/context, the annotation spans, notes). Events the
    annotations leave unassigned keep nulls; :func:`~asaptrace.enrich.structure.fill_from_structure`
    handles them once kinds are known. ``outside``: host rows of the same ranks not in ``events``,
    whose launches count as if they were (none of them is an annotation).
    """
    notes = SegmentNotes()
    events = step_named_host(events, taxonomy)
    spans = annotation_spans(events, args, taxonomy)
    launched = outside.launches(spans) if outside is not None and spans.height else None
    ev = events.drop("step", "layer", "micro_batch").with_row_index("_row")
    n = ev.height
    span_of = np.full(n, -1, dtype=np.int64)
    if spans.height:
        is_ann = (ev.get_column("kind") == Kind.ANNOTATION.value).to_numpy()
        # only the columns each step reads are filtered (a big rank's filtered copies are its peak)
        keys = ev.select("_row", "rank", "pid", "stream", "is_device", "ts_ns", "corr", "eid")
        host = keys.filter(~pl.col("is_device"))
        # 2. host events: innermost host span on their own thread
        rows, idx = innermost(host, spans, False, ["rank", "pid", "stream"])
        span_of[rows] = idx
        del host
        # annotation events are their own span
        own = keys.filter(is_ann).join(spans.select("rank", "eid", "span"), on=["rank", "eid"], how="left")
        span_of[own.get_column("_row").to_numpy()] = own.get_column("span").fill_null(-1).to_numpy()
        # 3a. device events: the span of their launch (same rank, same correlation id)
        dev = keys.filter(pl.col("is_device") & ~pl.Series(is_ann))
        launching = keys.select("rank", "corr", "eid", "is_device", _span=pl.Series(span_of)).filter(
            ~pl.col("is_device") & pl.col("corr").is_not_null() & (pl.col("_span") >= 0)
        )
        if launched is None:
            launches = launching.group_by("rank", "corr").agg(pl.col("_span").first())
        else:  # the first launch in the file (rows are in eid order in either frame alone)
            rows = pl.concat([launching.drop("is_device"), launched[0]], how="vertical_relaxed")
            launches = rows.group_by("rank", "corr").agg(pl.col("_span").sort_by("eid").first())
        linked = dev.join(launches, on=["rank", "corr"], how="left")
        span_of[linked.get_column("_row").to_numpy()] = linked.get_column("_span").fill_null(-1).to_numpy()
        # 3b. not linked: innermost device span on their own stream
        rest = dev.filter(pl.lit(pl.Series(span_of)).gather(pl.col("_row")) < 0)
        if rest.height:
            rows, idx = innermost(rest, spans, True, ["rank", "pid", "stream"])
            span_of[rows] = idx
    values = span_values(spans, span_of)
    ev = ev.with_columns(values)
    # 3b'. no span: the profiler's own step id (Ascend kernel_details.csv's Step Id)
    ids = step_ids(ev.select("_row", "rank", "eid", "is_device"), args)
    if ids.height:
        said = np.full(n, -1, dtype=np.int64)
        said[ids.get_column("_row").to_numpy()] = ids.get_column("_sid").to_numpy()
        said_s = pl.Series(said).cast(pl.Int32)
        ev = ev.with_columns(
            step=pl.when(pl.col("step").is_null() & (said_s >= 0)).then(said_s).otherwise("step")
        )
        notes.notes.append("steps from the profiler's step ids (the Step Id of kernel_details.csv)")
    ev = ev.drop("_row")
    # 3c. still no step: the step span that contains the event on its rank (any stream)
    ev = step_from_rank_spans(ev, spans, None if launched is None else launched[1])
    has_steps = ids.height > 0 or (spans.height > 0 and spans.get_column("is_step_span").any())
    has_layers = spans.height > 0 and spans.get_column("is_layer_span").any()
    notes.step_source = "annotations" if has_steps else "none"
    notes.layer_source = "annotations" if has_layers else "none"
    return ev, spans, notes


def span_values(spans: pl.DataFrame, span_of: np.ndarray) -> list[pl.Series]:
    valid = span_of >= 0
    safe = np.where(valid, span_of, 0)

    def pick(name: str, dtype: pl.DataType) -> pl.Series:
        if spans.height == 0:
            return pl.repeat(None, len(span_of), dtype=dtype, eager=True).alias(name)
        src = spans.get_column(name)
        taken = src.gather(safe)
        return taken.set(pl.Series(~valid), None).cast(dtype).alias(name)

    return [
        pick("step", pl.Int32),
        pick("layer", pl.Int16),
        pick("micro_batch", pl.Int8),
        pick("context", pl.String),
    ]


def step_from_rank_spans(
    ev: pl.DataFrame, spans: pl.DataFrame, launched: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Events still without a step take the step span that contains them on their rank, whatever
    the thread or stream: a host event by its own start (the autograd engine runs the backward on
    a thread of its own, outside the thread's ``ProfilerStep`` span), a kernel by its launch's
    start when it has one (a kernel launched inside a step belongs to it even when it runs after
    the span ends). A kernel with no launch goes by the device's own time: the step whose device
    work runs when it starts (:func:`~asaptrace.enrich.step_links.device_window_steps`: a GPU
    running behind its CPU is in step N while the host is in N+1), else the step span by its own
    start."""
    steps = (
        spans.filter(pl.col("is_step_span") & pl.col("own_step").is_not_null())
        .group_by("rank", "own_step")
        .agg(pl.col("ts_ns").min().alias("_s"), pl.col("end_ns").max().alias("_e"))
        .sort("_s")
        if spans.height
        else pl.DataFrame()
    )
    if steps.height == 0 and not ev.select((pl.col("is_device") & pl.col("step").is_not_null()).any()).item():
        return ev
    ev = ev.with_row_index("_row")
    keys = ev.select("_row", "rank", "is_device", "corr", "ts_ns", "step", "kind")  # what is read below
    missing = keys.filter(pl.col("step").is_null() & (pl.col("kind") != Kind.ANNOTATION.value))
    if missing.height == 0:
        return ev.drop("_row")
    host = missing.filter(~pl.col("is_device")).select("_row", "rank", "ts_ns")
    launches = (
        keys.filter(~pl.col("is_device") & pl.col("corr").is_not_null())
        .group_by("rank", "corr")
        .agg(pl.col("ts_ns").min().alias("_launch"))
    )
    if launched is not None:  # launches among the rows kept out of ``ev`` (``segment``'s outside)
        # only those of the kernels still without a step, kept before the group-by (a big rank has a
        # launch per kernel: grouping them all was its segmentation's peak, +180 MB at 2 GB)
        wanted = missing.filter(pl.col("is_device")).select("rank", "corr").unique()
        launches = (
            pl.concat(
                [launches, launched.join(wanted, on=["rank", "corr"], how="semi")], how="vertical_relaxed"
            )
            .group_by("rank", "corr")
            .agg(pl.col("_launch").min())
        )
    dev = (
        missing.filter(pl.col("is_device"))
        .select("_row", "rank", "corr", "ts_ns")
        .join(launches, on=["rank", "corr"], how="left")
    )
    by_window = device_window_steps(ev, dev.filter(pl.col("_launch").is_null()))
    dev = dev.join(by_window, on="_row", how="anti").select(
        "_row", "rank", pl.coalesce("_launch", "ts_ns").alias("ts_ns")
    )
    fill = np.full(ev.height, -1, dtype=np.int64)
    fill[by_window.get_column("_row").to_numpy()] = by_window.get_column("step").to_numpy()
    if steps.height:
        hit = (
            pl.concat([host, dev])
            .sort("ts_ns")
            .join_asof(
                steps, left_on="ts_ns", right_on="_s", by="rank", strategy="backward", check_sortedness=False
            )
            .filter(pl.col("ts_ns") < pl.col("_e"))
        )
        fill[hit.get_column("_row").to_numpy()] = hit.get_column("own_step").to_numpy()
    fill_s = pl.Series("_fill", fill).cast(pl.Int32)
    return ev.with_columns(
        step=pl.when(pl.col("step").is_null() & (fill_s >= 0)).then(fill_s).otherwise(pl.col("step"))
    ).drop("_row")
