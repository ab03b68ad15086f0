"""One barrier as a human sees it: the collective instances of a run without layers, who arrived
in which order at one instance, where it sits and the window to look at it in (the dashboard's
barriers page, the report's timeline window)."""

from __future__ import annotations

from typing import Any

import polars as pl

from asaptrace.views.diagnosis import empty_reason, key_table, short_op
from asaptrace.views.table import TableView


def instance_at(barrier_instances: pl.DataFrame, *, step: int | None, rank: int, layer: int) -> int | None:
    """The barrier instance of a heatmap cell: where ``rank`` waited longest in that step and layer."""
    t = barrier_instances.filter((pl.col("rank") == rank) & (pl.col("layer") == layer))
    if step is not None:
        t = t.filter(pl.col("step") == step)
    if t.height == 0:
        return None
    return int(t.sort(["wait_ns", "instance"], descending=[True, False]).get_column("instance")[0])


def arrival_order(barrier_instances: pl.DataFrame, instance: int) -> TableView:
    """One barrier instance's ranks in the order they arrived: offset from the first, wait, last."""
    t = barrier_instances.filter(pl.col("instance") == instance).sort("arrival_ns", "rank")
    cols = ["order", "rank", "dp_group", "after_first_ns", "wait_ns", "is_last"]
    rows = t.with_columns(
        pl.int_range(1, pl.len() + 1).alias("order"),
        (pl.col("arrival_ns") - pl.col("arrival_ns").min()).alias("after_first_ns"),
    ).select(cols)
    return TableView(
        f"arrival order at instance {instance} ({instance_where(barrier_instances, instance)})",
        cols,
        rows,
        labels=["#", "rank", "DP", "arrived after the first", "wait", "last"],
    )


def instances_view(tables: dict[str, pl.DataFrame], *, step: int | None, limit: int) -> TableView | None:
    """The matched collective instances of a run without layers (None when it has layers: they
    are summed by layer there), one step or all, in arrival order."""
    inst = tables["barrier_instances"]
    if inst.height and inst.get_column("layer").is_not_null().any():
        return None
    key = key_table("barrier_by_instance")
    t = tables["barrier_by_instance"]
    if step is not None:
        t = t.filter(pl.col("step") == step)
    t = t.with_columns(short_op())
    reason = (
        "" if t.height else empty_reason(key.name, tables) + (f" in step {step}" if step is not None else "")
    )
    return TableView(
        key.title,
        list(key.columns),
        t.select(key.columns).head(limit),
        max(t.height - limit, 0),
        key.caption,
        key.name,
        reason=reason,
    )


def instance_where(barrier_instances: pl.DataFrame, instance: int) -> str:
    """Where an instance is, in words: "ncclKernel_AllReduce…, step 10" (layer and micro-batch when known)."""
    t = barrier_instances.filter(pl.col("instance") == instance)
    if t.height == 0:
        return "unknown instance"
    r = t.row(0, named=True)
    parts = [str(r["op"]).split("(")[0][:60]]
    parts += [
        f"{k.replace('_', '-')} {r[k]}" for k in ("step", "layer", "micro_batch") if r.get(k) is not None
    ]
    return ", ".join(parts)


def instance_window(barrier_instances: pl.DataFrame, instance: int) -> dict[str, Any]:
    """Where to look at one instance on the timeline: step, layer, its ranks, [first arrival, release]."""
    t = barrier_instances.filter(pl.col("instance") == instance)
    first = t.row(0, named=True)
    return {
        "step": first["step"],
        "layer": first["layer"],
        "ranks": sorted(t.get_column("rank").to_list()),
        "window_ns": (int(t.get_column("arrival_ns").min()), int(t.get_column("release_ns").max())),  # type: ignore[arg-type]
    }


def window_text(step: int, layers: tuple[int, int] | None) -> str:
    """The timeline window a report shows: the step and layers where the summed wait is largest;
    without a wait inside a layer, the first step whole (nothing to point at, so no "worst" said)."""
    if not layers:
        return f"step {step}, the whole step (no wait inside a layer to point at)"
    return f"step {step}, layers {layers[0]}–{layers[1]} (where the summed wait is largest)"
