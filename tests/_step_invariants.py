"""What must hold of the steps of any enriched store (issue 39, DOMAIN.md §9), read from the store
alone, so that the test of every real trace, sample and preset says which one broke it and how.

A *step mark* is what the trace says a step is: an annotation named as a step by the frameworks
the corpus holds (``ProfilerStep#N`` of any category, asaptrace's ``prefill_step#N``, SGLang's
``step[…]``, vLLM's ``execute_…``), or a kernel's step id (Ascend ``kernel_details.csv``'s
``Step Id``, kept as ``profiler_step`` in the args' ``extra``). When a store holds any:

1. its steps come from them (``step_source`` is ``annotations``, never ``gaps``);
2. every step of a rank's device work is a step its marks name (no step made up from gaps, from
   an order, or from a mirror numbered apart);
3. one step is one annotation: the host annotations of one step on a rank overlap (a nested
   ``step[…]`` inside ``execute_…``), never two apart; a device copy names no step the host lacks;
4. every step starts at its annotation: the first work of step N was launched (its runtime call,
   else its own start) no earlier than step N's host annotation begins.

Without any mark the steps were cut at gaps, and a cut never runs through a kernel: on each rank,
step N's device work ends before step N+1's begins.
"""

from __future__ import annotations

import polars as pl

STEP_NAMES = r"^ProfilerStep#\d+$|^prefill_step#\d+$|^step\[|^execute_"


def step_violations(store) -> list[str]:
    """Every broken invariant of the module docstring, one line each (empty: all hold)."""
    ev = (
        store.events()
        .select("rank", "is_device", "kind", "name", "ts_ns", "dur_ns", "step", "corr", "eid")
        .with_columns(pl.col("kind").cast(pl.String), pl.col("name").cast(pl.String))
        .collect()
    )
    named = pl.col("name").str.contains(STEP_NAMES)
    marks = ev.filter(named & ((pl.col("kind") == "annotation") | ~pl.col("is_device")))  # any category
    args = store.read("args").select("rank", "eid", "extra")
    ids = args.filter(pl.col("extra").str.contains('"profiler_step"', literal=True).fill_null(False))
    work = ev.filter(pl.col("is_device"), pl.col("kind") != "annotation", pl.col("step").is_not_null())
    source = store.meta["segmentation"]["step_source"]
    if marks.height == 0 and ids.height == 0:
        return _gap_violations(work) if source == "gaps" else []
    broken = [] if source == "annotations" else [f"step_source {source!r} though the trace marks its steps"]
    host = marks.filter(~pl.col("is_device"))
    said = pl.concat(
        [
            marks.filter(pl.col("step").is_not_null()).select("rank", "step"),
            ev.join(ids, on=["rank", "eid"], how="semi").select("rank", "step"),
        ]
    ).unique()
    stray = (
        work.select("rank", "step").unique().join(said, on=["rank", "step"], how="anti").sort("rank", "step")
    )
    if stray.height:
        broken.append(f"device steps no mark names (rank, step): {stray.rows()[:5]}")
    apart = (
        host.filter(pl.col("step").is_not_null())
        .group_by("rank", "step")
        .agg(
            pl.col("ts_ns").max().alias("last_start"),
            (pl.col("ts_ns") + pl.col("dur_ns")).min().alias("first_end"),
        )
        .filter(pl.col("last_start") >= pl.col("first_end"))
    )
    if apart.height:
        broken.append(
            f"one step on two disjoint host annotations (rank, step): {apart.select('rank', 'step').rows()[:5]}"
        )
    ranks_with_host = host.select("rank").unique()
    copies = (
        marks.filter(pl.col("is_device"), pl.col("step").is_not_null())
        .join(ranks_with_host, on="rank", how="semi")
        .select("rank", "step")
        .unique()
        .join(host.select("rank", "step").unique(), on=["rank", "step"], how="anti")
    )
    if copies.height:
        broken.append(
            f"device step annotations naming steps the host lacks (rank, step): {copies.rows()[:5]}"
        )
    broken += _starts_before_annotation(ev, work, host)
    return broken


def _starts_before_annotation(ev: pl.DataFrame, work: pl.DataFrame, host: pl.DataFrame) -> list[str]:
    """Steps whose first work was launched (else started) before their host annotation began."""
    launches = (
        ev.filter(~pl.col("is_device"), pl.col("corr").is_not_null())
        .group_by("rank", "corr")
        .agg(pl.col("ts_ns").min().alias("launch"))
    )
    first = (
        work.join(launches, on=["rank", "corr"], how="left")
        .group_by("rank", "step")
        .agg(pl.coalesce("launch", "ts_ns").min().alias("first"))
    )
    begins = host.group_by("rank", "step").agg(pl.col("ts_ns").min().alias("begin"))
    early = first.join(begins, on=["rank", "step"], how="inner").filter(pl.col("first") < pl.col("begin"))
    return (
        [
            f"steps whose first work came before their annotation (rank, step, ns early): "
            f"{early.select('rank', 'step', pl.col('begin') - pl.col('first')).rows()[:5]}"
        ]
        if early.height
        else []
    )


def _gap_violations(work: pl.DataFrame) -> list[str]:
    """Cuts through a kernel: step N's device work ending after step N+1's begins on a rank."""
    spans = (
        work.group_by("rank", "step")
        .agg(pl.col("ts_ns").min().alias("start"), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("end"))
        .sort("rank", "step")
        .with_columns(next_start=pl.col("start").shift(-1).over("rank"))
        .filter(pl.col("end") > pl.col("next_start"))
    )
    return (
        [f"gap cuts through a kernel (rank, step): {spans.select('rank', 'step').rows()[:5]}"]
        if spans.height
        else []
    )
