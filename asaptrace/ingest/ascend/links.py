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
        .with_columns(
            prio=pl.col("cat").replace_strict(
                _FLOW_PRIORITY, default=len(_FLOW_PRIORITY), return_dtype=pl.Int64
            )
        )
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
    """For each flow point, the row of the innermost event on its (pid, stream) enclosing its time.

    Events are sorted once by (pid, stream, start, longest first); a point's candidate is the last
    slice of its thread starting at or before it (a binary search), and when that one has already
    ended the search climbs back to an enclosing parent (at most ``_MAX_WALK`` steps) — all numpy.
    """
    e_pid, e_stream = events["pid"].to_numpy(), events["stream"].to_numpy()
    ts = events["ts_ns"].to_numpy()
    end = ts + events["dur_ns"].to_numpy()
    p_pid, p_stream, p_ts = flows["pid"].to_numpy(), flows["stream"].to_numpy(), flows["ts_ns"].to_numpy()
    e_key = _thread_key(e_pid, e_stream)
    p_key = _thread_key(p_pid, p_stream)
    # equal starts: the innermost (shortest) last; exact ties keep polars' own sort order, then the
    # rows are grouped by thread (stable), as the as-of join by thread used to see them
    by_time = (
        pl.DataFrame({"ts": ts, "end": end, "row": np.arange(len(ts), dtype=np.int64)})
        .sort(["ts", "end"], descending=[False, True])["row"]
        .to_numpy()
    )
    order = by_time[np.argsort(e_key[by_time], kind="stable")]
    s_key, s_ts, s_end = e_key[order], ts[order], end[order]
    # per thread: the last slice starting at or before each point (-1 below the thread's first)
    j = np.full(len(p_ts), -1, dtype=np.int64)
    lo = np.zeros(len(p_ts), dtype=np.int64)
    p_order = np.argsort(p_key, kind="stable")
    keys, first = np.unique(p_key[p_order], return_index=True)
    bounds = zip(keys.tolist(), first.tolist(), [*first[1:].tolist(), len(p_order)], strict=True)
    for k, p0, p1 in bounds:
        a, b = int(np.searchsorted(s_key, k, side="left")), int(np.searchsorted(s_key, k, side="right"))
        at = p_order[p0:p1]
        lo[at] = a
        j[at] = a + np.searchsorted(s_ts[a:b], p_ts[at], side="right") - 1
    valid = j >= lo
    rows = np.full(len(p_ts), -1, dtype=np.int64)
    jj = np.where(valid, j, 0)
    inside = valid & (s_end[jj] >= p_ts) if len(s_end) else valid
    rows[inside] = order[j[inside]]
    climb = np.flatnonzero(valid & ~inside)
    cur = j[climb] - 1
    floor = lo[climb]
    t = p_ts[climb]
    for _ in range(_MAX_WALK - 1):
        live = cur >= floor
        if not live.any():
            break
        climb, cur, floor, t = climb[live], cur[live], floor[live], t[live]
        found = s_end[cur] >= t
        rows[climb[found]] = order[cur[found]]
        keep = ~found
        climb, cur, floor, t = climb[keep], cur[keep] - 1, floor[keep], t[keep]
    return rows


def _thread_key(pid: np.ndarray, stream: np.ndarray) -> np.ndarray:
    return (pid.astype(np.int64) << 32) | (stream.astype(np.int64) & 0xFFFFFFFF)
