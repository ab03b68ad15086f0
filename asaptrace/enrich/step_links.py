"""What makes a step one step, whatever the profiler wrote it as (issue 39, ``DOMAIN.md`` §9).

A step is the framework's own annotation. Three things here make sure each one is counted once and
every event lands in the step that owns it (:mod:`asaptrace.enrich.segment` applies them):

- **any category.** ``ProfilerStep#N`` is a ``user_annotation`` in today's Kineto, an ``Operator``
  in older Kineto (a ResNet50 trace) and a ``cpu_op`` in torch_npu's timeline: a host event named
  by the taxonomy's ``step_annotations`` is an annotation whatever its category
  (:func:`step_named_host`), so that it cuts steps and no analysis counts it as a host op.
- **one step, its mirrors included.** Kineto copies a CPU annotation onto each GPU stream that ran
  work launched inside it (``gpu_user_annotation``, same name, same ``External id``). A step span
  named without a number (vLLM's ``execute_…``) was numbered by its order, host and device apart,
  so a mirror on two streams made two steps. :func:`mirrors` links each device span to the host
  span it copies: by ``External id`` and name, else the k-th span of a name on a stream to the
  k-th host span of that name on the rank.
- **the device's own time.** Device work with no launch link (no correlation id) that no span
  holds, starting while the work of step N runs on the device (from its first start to its last
  end, :func:`device_window_steps`), is step N's: a GPU running behind its CPU does not push it
  into the step the host is in by then. Between two steps' work (a collective that opens a step
  before its first launched kernel) the host's step span at that time says.

And Ascend's ``kernel_details.csv`` says the step of each kernel (``Step Id``, kept by the reader
in the args' ``extra`` as ``profiler_step``): :func:`step_ids` reads it, for device work the
annotations left without a step.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from asaptrace.enrich.taxonomy import Taxonomy
from asaptrace.schema import Kind

_ANNOTATION = Kind.ANNOTATION.value
_STEP_ID = pl.Struct({"profiler_step": pl.Int64})


def step_named_host(events: pl.DataFrame, taxonomy: Taxonomy) -> pl.DataFrame:
    """``events`` with each host event named as a step annotation (``ProfilerStep#N`` of category
    ``Operator`` or ``cpu_op``) made an annotation; the frame itself when there is none."""
    patterns = taxonomy.step_annotations
    if not patterns or events.height == 0:
        return events
    host = ~pl.col("is_device") & (pl.col("kind") != _ANNOTATION)
    names = events.select(pl.col("name").filter(host).unique()).to_series().cast(pl.String).drop_nulls()
    hit = [n for n in names.to_list() if any(p.search(n) for p in patterns)]
    if not hit:
        return events
    dtype = events.schema["kind"]
    named = host & pl.col("name").cast(pl.String).is_in(hit)
    kind = pl.when(named).then(pl.lit(_ANNOTATION)).otherwise(pl.col("kind").cast(pl.String))
    return events.with_columns(kind.cast(dtype).alias("kind"))


def mirrors(ann: pl.DataFrame, args: pl.DataFrame) -> np.ndarray:
    """For each row of ``ann`` (annotation spans in tree order, with ``is_step_span`` and
    ``own_step``), the row of the host span it mirrors, or -1: only device step spans without a
    step of their own are linked (the ones that would otherwise be numbered by their order)."""
    out = np.full(ann.height, -1, dtype=np.int64)
    rows = ann.with_row_index("_i")
    need = rows.filter(
        pl.col("is_device") & pl.col("is_step_span").fill_null(False) & pl.col("own_step").is_null()
    )
    if need.height == 0:
        return out
    host = rows.filter(~pl.col("is_device") & pl.col("is_step_span").fill_null(False))
    ext = args.filter(pl.col("external_id").is_not_null()).select("rank", "eid", "external_id")
    keys = ["rank", "external_id", "name"]
    host_ext = (
        host.join(ext, on=["rank", "eid"], how="inner").group_by(keys).agg(pl.col("_i").min().alias("_m"))
    )
    linked = need.join(ext, on=["rank", "eid"], how="left").join(host_ext, on=keys, how="left")
    # no External id: the k-th span of a name on a stream ↔ the k-th host span of that name
    nth = pl.col("ts_ns").rank("ordinal")
    by_order = host.select("rank", "name", (nth.over("rank", "name")).alias("_k"), pl.col("_i").alias("_o"))
    linked = (
        linked.with_columns(_k=nth.over("rank", "pid", "stream", "name"))
        .join(by_order, on=["rank", "name", "_k"], how="left")
        .select("_i", pl.coalesce("_m", "_o").alias("_m"))
        .filter(pl.col("_m").is_not_null())
    )
    out[linked.get_column("_i").to_numpy()] = linked.get_column("_m").to_numpy()
    return out


def step_ids(keys: pl.DataFrame, args: pl.DataFrame) -> pl.DataFrame:
    """(_row, _sid): the profiler's step id of each device event of ``keys`` (_row, rank, eid,
    is_device) that has one in its args (Ascend ``kernel_details.csv``'s ``Step Id``)."""
    said = args.filter(pl.col("extra").str.contains('"profiler_step"', literal=True).fill_null(False))
    if said.height == 0:
        return pl.DataFrame(schema={"_row": pl.UInt32, "_sid": pl.Int64})
    ids = said.select(
        "rank", "eid", _sid=pl.col("extra").str.json_decode(_STEP_ID).struct.field("profiler_step")
    ).filter(pl.col("_sid").is_not_null())
    dev = keys.filter(pl.col("is_device")).select("_row", "rank", "eid")
    return dev.join(ids, on=["rank", "eid"], how="inner").select("_row", "_sid")


def device_window_steps(ev: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """(_row, step) of the device events ``rows`` (_row, rank, ts_ns) that start while the device
    work of a step runs on their rank: from the first start to the last end of that step's device
    work in ``ev`` (annotations aside); where two overlap, the step that began last."""
    none = pl.DataFrame(schema={"_row": pl.UInt32, "step": pl.Int32})
    if rows.height == 0:
        return none
    work = ev.select("is_device", "kind", "rank", "step", "ts_ns", "dur_ns").filter(
        pl.col("is_device") & (pl.col("kind") != _ANNOTATION) & pl.col("step").is_not_null()
    )
    if work.height == 0:
        return none
    windows = (
        work.group_by("rank", "step")
        .agg(pl.col("ts_ns").min().alias("_s"), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("_e"))
        .sort("_s")
    )
    hit = (
        rows.select("_row", "rank", "ts_ns")
        .sort("ts_ns")
        .join_asof(
            windows.select("rank", "step", "_s", "_e"),
            left_on="ts_ns",
            right_on="_s",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("ts_ns") < pl.col("_e"))
    )
    return hit.select("_row", pl.col("step").cast(pl.Int32))
