"""Launch ↔ device-task links of an Ascend timeline, recovered from its flow arrows.

torch_npu writes no correlation id shared by a host call and the device task it launched; it
draws flow arrows instead: ``HostToDevice`` from the CANN call (``AscendCL@aclnn…``) that issued the
task, and ``async_npu`` from the framework op (``aclnnMm`` on the Python thread). Each arrow end
binds, as in the Chrome trace viewer (``"bp": "e"``), to the innermost slice on its own
(pid, thread) that encloses the arrow's timestamp.

From these we fill the canonical ``corr`` column the way Kineto's ``correlation`` reads: a device
task and its launcher share one value; a launcher that issued several tasks gives them all the
same value. ``HostToDevice`` (the runtime call, Kineto's ``cudaLaunchKernel``) is preferred over
the framework-op arrow; a correlation the source already carries is never overwritten.
"""

from __future__ import annotations

import bisect

import numpy as np
import polars as pl
import pyarrow as pa

#: Flow categories, most launch-like first; any other category ranks after these.
_FLOW_PRIORITY = {"HostToDevice": 0, "async_npu": 1}
_MAX_WALK = 256  # nesting depth we are willing to climb when the latest slice has already ended


def launch_corr(events: pa.Table, flows: pa.Table) -> pa.Array:
    """The ``corr`` column of ``events`` with launch links from ``flows`` filled in where null."""
    corr = events["corr"].combine_chunks() if events.num_rows else pa.array([], pa.int64())
    if flows.num_rows == 0 or events.num_rows == 0:
        return corr
    ends = _bind_flow_ends(events, flows)  # flow point → event row (or -1)
    fl = (
        pl.from_arrow(flows.select(["flow_id", "cat"]))
        .with_columns(pl.col("cat").fill_null(""), row=pl.Series(ends))
        .filter(pl.col("row") >= 0)
    )
    is_dev = events["is_device"].to_numpy(zero_copy_only=False)
    fl = fl.with_columns(dev=pl.Series(is_dev[fl["row"].to_numpy()]))
    pairs = (
        fl.filter(pl.col("dev"))
        .select("flow_id", "cat", device=pl.col("row"))
        .join(fl.filter(~pl.col("dev")).select("flow_id", "cat", host=pl.col("row")), on=["flow_id", "cat"])
        .with_columns(prio=pl.col("cat").replace_strict(_FLOW_PRIORITY, default=len(_FLOW_PRIORITY),
                                                         return_dtype=pl.Int64))
        .sort("device", "prio", "host")
        .unique("device", keep="first", maintain_order=True)
    )
    if pairs.height == 0:
        return corr
    values = corr.to_numpy(zero_copy_only=False).astype("float64")  # NaN where null
    has = ~np.isnan(values)
    base = int(np.nanmax(values)) + 1 if has.any() else 0
    dev = pairs["device"].to_numpy()
    host = pairs["host"].to_numpy()
    keep = ~has[dev]  # never overwrite a correlation the source wrote
    dev, host = dev[keep], host[keep]
    eids = events["eid"].to_numpy()
    launch_value = np.where(has[host], values[host], base + eids[host])
    out = values.copy()
    out[dev] = launch_value
    fill_host = ~has[host]
    out[host[fill_host]] = launch_value[fill_host]
    mask = np.isnan(out)
    return pa.array(np.where(mask, 0, out).astype(np.int64), pa.int64(), mask=mask)


def _bind_flow_ends(events: pa.Table, flows: pa.Table) -> np.ndarray:
    """For each flow point, the row of the innermost event on its (pid, stream) enclosing its time."""
    ev = pl.DataFrame(
        {
            "pid": events["pid"].to_numpy(),
            "stream": events["stream"].to_numpy(),
            "ts": events["ts_ns"].to_numpy(),
            "end": events["ts_ns"].to_numpy() + events["dur_ns"].to_numpy(),
            "row": np.arange(events.num_rows, dtype=np.int64),
        }
    ).sort(["ts", "end"], descending=[False, True])  # equal starts: the innermost (shortest) last
    pts = pl.DataFrame(
        {
            "pid": flows["pid"].to_numpy(),
            "stream": flows["stream"].to_numpy(),
            "ts": flows["ts_ns"].to_numpy(),
            "point": np.arange(flows.num_rows, dtype=np.int64),
        }
    ).sort("ts")
    hit = pts.join_asof(ev, on="ts", by=["pid", "stream"], check_sortedness=False).sort("point")
    rows = hit["row"].fill_null(-1).to_numpy().copy()
    inside = hit["end"].fill_null(-1).to_numpy() >= hit["ts"].to_numpy()
    misses = np.flatnonzero((rows >= 0) & ~inside)
    rows[(rows >= 0) & ~inside] = -1
    if len(misses):
        rows[misses] = _climb(ev, hit, misses)
    return rows


def _climb(ev: pl.DataFrame, hit: pl.DataFrame, misses: np.ndarray) -> np.ndarray:
    """The latest-starting slice had ended: look further back for an enclosing (parent) slice."""
    groups: dict[tuple[int, int], tuple[list[int], np.ndarray, np.ndarray]] = {}
    for (pid, stream), g in ev.group_by(["pid", "stream"]):
        g = g.sort(["ts", "end"], descending=[False, True])
        groups[(int(pid), int(stream))] = (g["ts"].to_list(), g["end"].to_numpy(), g["row"].to_numpy())
    pid = hit["pid"].to_numpy()
    stream = hit["stream"].to_numpy()
    ts = hit["ts"].to_numpy()
    out = np.full(len(misses), -1, dtype=np.int64)
    for k, i in enumerate(misses):
        starts, gends, grows = groups[(int(pid[i]), int(stream[i]))]
        j = bisect.bisect_right(starts, int(ts[i])) - 1
        for _ in range(_MAX_WALK):
            if j < 0:
                break
            if gends[j] >= ts[i]:
                out[k] = grows[j]
                break
            j -= 1
    return out
