"""The dependency graph of one window (one step or one annotation instance) across its ranks (private).

Built the way HTA's critical-path analysis builds it (``hta/analyzers/critical_path_analysis.py``),
so that on one rank both walk to the same path; numpy throughout, no per-event Python except the
instance joins:

* every event of the window is two **nodes**, its start and its end (host ops of kind ``host`` with
  a positive duration; device work of any kind but ``annotation``);
* **host order** — on each host thread the ops' starts and ends in call-stack order
  (parent before child) are chained; an edge weighs the time between its nodes, except the edge
  between two top-level ops (a *dependency*, 0: HTA counts only the time inside ops) and the edge
  into the end of a blocking call (``cudaStreamSynchronize``, ``cudaMemcpyAsync`` …: 0, its wait is
  the device's);
* **device spans** — a kernel's or copy's start → end, weighing its duration;
* **launch → kernel** — a launch delay (the launch call's start → the kernel's start) when the
  stream had nothing queued at the launch and nothing else launched before the kernel began (HTA's
  queue-length rule), else **stream order** — the previous kernel's end → this kernel's start,
  weighing the gap;
* **synchronisation** — ``Stream Sync`` / ``Context Sync`` device records: the last work on the
  stream (all streams) → the end of the synchronising call (0);
* **event record → wait** — a CUDA event wait names its ``cudaEventRecord`` and that event's
  stream (args kept by the Kineto reader): the source is the last work launched on that stream
  before the record; an ``Event Sync`` (``cudaEventSynchronize`` / ``cudaEventQuery``) joins it to
  the end of the waiting call (0); a ``Stream Wait Event`` to the start of the next kernel launched
  from the same thread onto the waiting stream (0), which then takes no stream-order or launch
  edge from before that work ended (HTA's rule);
* **collective instances** (several ranks): a matched instance is one *release* node at its last
  arrival; the last rank to arrive enters it from the start of its first kernel of the instance, and
  it leaves to the end of every rank's last kernel of the instance (the transfer). That kernel's own
  span is removed, so a rank that waited can reach the rest of the step only through the release:
  the barrier wait of the others is off the path by construction.

Edge types (``ETYPE``) and what their time is on the path (:data:`EDGE_KINDS`) are shared with the
walk and the what-if.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Host calls that launch device work (HTA's launch list): their kernels take part in the queue rule.
LAUNCH_CALLS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cudaMemcpyAsync",
        "cudaMemsetAsync",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipMemsetAsync",
        "hipMemcpyAsync",
        "hipMemcpyWithStream",
    }
)
#: Host calls that block until the device catches up (HTA's list): no host time inside them.
BLOCKING_CALLS = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventQuery",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "cudaMemcpyAsync",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
    }
)
STREAM_SYNC, CONTEXT_SYNC = "Stream Sync", "Context Sync"
#: Device records of a synchronisation, not work (``cuda_sync``): never a span on the path.
SYNC_RECORDS = (STREAM_SYNC, CONTEXT_SYNC, "Event Sync", "Stream Wait Event")

# edge types
SPAN, HOST, DEP, LAUNCH, GAP, SYNC, JOIN_IN, JOIN_OUT = range(8)


@dataclass
class Window:
    """The events of one window as numpy columns (one row per event; index = event id here)."""

    rank: np.ndarray  # int32
    thread: np.ndarray  # int64: (pid, stream) of the event, per rank
    is_device: np.ndarray  # bool
    kind: np.ndarray  # object (str)
    name: np.ndarray  # object (str)
    ts: np.ndarray  # int64
    end: np.ndarray  # int64
    corr: np.ndarray  # int64, -1 when none
    eid: np.ndarray  # int64 (the store's event id within its rank)
    stream: np.ndarray  # int32 (the store's stream: device stream or host thread)
    wait_record: np.ndarray | None = None  # int64: a CUDA event wait's cudaEventRecord correlation (-1)
    wait_stream: np.ndarray | None = None  # int64: that event's stream (-1)


@dataclass
class Graph:
    """Nodes 2·i (start of event i) and 2·i + 1 (its end), then one node per joined instance."""

    n_nodes: int
    node_ts: np.ndarray
    node_rank: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray
    etype: np.ndarray
    attr: np.ndarray  # event the edge's time belongs to (-1: none)
    window: Window


def build_graph(w: Window, joins: list[tuple[int, list[int], list[int]]]) -> Graph:
    """The graph of a window; ``joins``: per instance (last arriver's first kernel, every rank's
    first kernels, every rank's last kernels) as event indices of ``w``."""
    n = len(w.ts)
    parts = [_host_edges(w), _device_edges(w)]
    node_ts = np.empty(2 * n, np.int64)
    node_ts[0::2], node_ts[1::2] = w.ts, w.end
    node_rank = np.repeat(w.rank, 2)
    src, dst, wt, et, at = (np.concatenate([p[i] for p in parts]) for i in range(5))
    if joins:
        src, dst, wt, et, at, extra_ts, extra_rank = _join(w, joins, n, src, dst, wt, et, at)
        node_ts = np.concatenate([node_ts, extra_ts])
        node_rank = np.concatenate([node_rank, extra_rank])
    return Graph(len(node_ts), node_ts, node_rank, src, dst, wt, et, at, w)


def _edges(src, dst, weight, etype, attr):
    n = len(src)
    return (
        np.asarray(src, np.int64),
        np.asarray(dst, np.int64),
        np.asarray(weight, np.int64),
        np.full(n, etype, np.int8) if np.isscalar(etype) else np.asarray(etype, np.int8),
        np.broadcast_to(np.asarray(attr, np.int64), (n,)).copy(),
    )


def _host_edges(w: Window):
    """Call-stack order on each host thread (see the module docstring)."""
    idx = np.flatnonzero(~w.is_device)
    if len(idx) == 0:
        return _edges([], [], [], HOST, [])
    # points: starts and ends; order per thread by time; at one instant ends before starts, ends of
    # the later-started first, starts of the longer first (parent before child)
    ev = np.concatenate([idx, idx])
    is_start = np.concatenate([np.ones(len(idx), bool), np.zeros(len(idx), bool)])
    t = np.where(is_start, w.ts[ev], w.end[ev])
    tie = np.where(is_start, -(w.end[ev] - w.ts[ev]), -w.ts[ev])
    key_rank = w.rank[ev].astype(np.int64)
    order = np.lexsort((ev, tie, is_start, t, w.thread[ev], key_rank))
    ev, is_start, t = ev[order], is_start[order], t[order]
    thread = w.thread[ev] + (w.rank[ev].astype(np.int64) << 40)
    step = np.where(is_start, 1, -1)
    new = np.r_[True, thread[1:] != thread[:-1]]
    csum = np.cumsum(step)
    base = np.maximum.accumulate(np.where(new, np.r_[0, csum[:-1]], np.iinfo(np.int64).min))
    depth = csum - base  # depth after each point, per thread
    same = ~new[1:]
    a, b = np.flatnonzero(same), np.flatnonzero(same) + 1
    node = 2 * ev + (~is_start)
    weight = t[b] - t[a]
    dep = depth[a] == 0  # a top-level op ends: the next starts by dependency, weight 0
    blocking = np.isin(w.name[ev[b]], list(BLOCKING_CALLS)) & ~is_start[b]
    weight = np.where(dep | blocking, 0, weight)
    # the time between a and b belongs to a's event when a starts, to b's when b ends, else (an end
    # then a start inside a parent) to the parent: the last start at depth[a] before a
    attr = np.where(is_start[a], ev[a], np.where(~is_start[b], ev[b], -1))
    gap = np.flatnonzero((~is_start[a]) & is_start[b] & ~dep)
    if len(gap):
        starts = np.flatnonzero(is_start)
        skey = depth[starts].astype(np.int64) * (len(ev) + 1) + starts
        srt = np.argsort(skey)
        skey, starts = skey[srt], starts[srt]
        q = depth[a[gap]].astype(np.int64) * (len(ev) + 1) + a[gap]
        pos = np.searchsorted(skey, q) - 1
        attr[gap] = ev[starts[np.maximum(pos, 0)]]
    etype = np.where(dep, DEP, HOST)
    return _edges(node[a], node[b], weight, etype, attr)


def _device_edges(w: Window):
    """Spans, launch delays, stream order and synchronisations (see the module docstring)."""
    dev = np.flatnonzero(w.is_device)
    host = np.flatnonzero(~w.is_device)
    sync = dev[np.isin(w.name[dev], [STREAM_SYNC, CONTEXT_SYNC])]
    work = dev[~np.isin(w.name[dev], list(SYNC_RECORDS))]
    out = [_edges(2 * work, 2 * work + 1, w.end[work] - w.ts[work], SPAN, work)]
    # the launch of each kernel: the host event of the same rank with its correlation id
    launch = np.full(len(w.ts), -1, np.int64)
    if len(host) and len(work):
        hk = w.rank[host].astype(np.int64) << 40 | (w.corr[host] & ((1 << 40) - 1))
        hk = np.where(w.corr[host] >= 0, hk, -1)
        o = np.argsort(hk)
        hk_s, host_s = hk[o], host[o]
        wk = w.rank[work].astype(np.int64) << 40 | (w.corr[work] & ((1 << 40) - 1))
        p = np.clip(np.searchsorted(hk_s, wk), 0, len(hk_s) - 1)
        hit = (hk_s[p] == wk) & (w.corr[work] >= 0)
        launch[work[hit]] = host_s[p[hit]]
    qrun, qker = _queue_lengths(w, work, launch)
    ksync, event_edges = _event_waits(w, work, launch)
    out.append(event_edges)
    # stream order per (rank, stream), kernels by start time
    stream = w.thread[work] + (w.rank[work].astype(np.int64) << 40)
    o = np.lexsort((work, w.ts[work], stream))
    k, s = work[o], stream[o]
    prev = np.r_[-1, k[:-1]]
    prev = np.where(np.r_[False, s[1:] == s[:-1]], prev, -1)
    lk = launch[k]
    has_l = lk >= 0
    run_ts = np.where(has_l, w.ts[np.maximum(lk, 0)], 0)
    queue_empty = (qrun[k] == 1) & (qker[k] == 0)
    xs = ksync[k]  # the work each kernel waits on through an event (-1: none)
    x_end = np.where(xs >= 0, w.end[np.maximum(xs, 0)], np.iinfo(np.int64).min)
    use_launch = has_l & queue_empty & ((prev < 0) | (w.end[np.maximum(prev, 0)] < run_ts)) & (x_end < run_ts)
    use_gap = ~use_launch & (prev >= 0) & (x_end < w.end[np.maximum(prev, 0)])
    ws = xs >= 0
    out.append(_edges(2 * xs[ws] + 1, 2 * k[ws], np.zeros(int(ws.sum())), SYNC, -1))
    li = k[use_launch]
    out.append(_edges(2 * lk[use_launch], 2 * li, w.ts[li] - run_ts[use_launch], LAUNCH, -1))
    gi, gp = k[use_gap], prev[use_gap]
    out.append(_edges(2 * gp + 1, 2 * gi, w.ts[gi] - w.end[gp], GAP, gp))
    if len(sync):
        out.append(_sync_edges(w, sync, k, s, host))
    return tuple(np.concatenate([o_[i] for o_ in out]) for i in range(5))


def _event_waits(w: Window, work: np.ndarray, launch: np.ndarray):
    """CUDA event waits (see the module docstring): per event, the work a kernel waits on (-1), and
    the edges of ``Event Sync`` records to their waiting calls."""
    ksync = np.full(len(w.ts), -1, np.int64)
    none = _edges([], [], [], SYNC, [])
    if w.wait_record is None:
        return ksync, none
    recs = np.flatnonzero(w.is_device & (w.wait_record >= 0))
    if len(recs) == 0:
        return ksync, none
    host = {(int(w.rank[h]), int(w.corr[h])): h for h in np.flatnonzero(~w.is_device & (w.corr >= 0))}
    launched = work[launch[work] >= 0]
    launched = launched[np.isin(w.name[launch[launched]], list(LAUNCH_CALLS))]
    lts = w.ts[launch[launched]]
    src, dst = [], []
    for e in recs.tolist():
        rank = int(w.rank[e])
        record = host.get((rank, int(w.wait_record[e])))
        call = host.get((rank, int(w.corr[e])))
        if record is None or call is None:
            continue
        # the last work launched on the event's stream before the record
        mine = (w.rank[launched] == rank) & (w.stream[launched] == w.wait_stream[e]) & (lts <= w.ts[record])
        if not mine.any():
            continue
        x = int(launched[mine][np.argmax(lts[mine])])
        if w.name[e] == "Stream Wait Event":
            # the next kernel launched from the waiting call's thread onto the waiting stream
            nxt = (
                (w.rank[launched] == rank)
                & (w.stream[launched] == w.stream[e])
                & (w.thread[launch[launched]] == w.thread[call])
                & (lts >= w.ts[call])
            )
            if nxt.any():
                ksync[int(launched[nxt][np.argmin(lts[nxt])])] = x
        else:  # Event Sync: the host waits in the call
            src.append(2 * x + 1)
            dst.append(2 * call + 1)
    return ksync, _edges(src, dst, np.zeros(len(src)), SYNC, -np.ones(len(src)))


def _queue_lengths(w: Window, work: np.ndarray, launch: np.ndarray):
    """HTA's queue length per stream: +1 at each launch call, −1 at each kernel start (kernels of
    launch calls only); returns its value at the kernel's launch and at the kernel's start."""
    qrun = np.full(len(w.ts), -1, np.int64)
    qker = np.full(len(w.ts), -1, np.int64)
    k = work[launch[work] >= 0]
    if len(k) == 0:
        return qrun, qker
    lk = launch[k]
    k = k[np.isin(w.name[lk], list(LAUNCH_CALLS))]
    lk = launch[k]
    stream = w.thread[k] + (w.rank[k].astype(np.int64) << 40)
    ts = np.concatenate([w.ts[lk], w.ts[k]])
    st = np.concatenate([stream, stream])
    d = np.concatenate([np.ones(len(k), np.int64), -np.ones(len(k), np.int64)])
    who = np.concatenate([k, k])
    o = np.lexsort((-d, ts, st))  # at one instant the launch first
    ts, st, d, who = ts[o], st[o], d[o], who[o]
    new = np.r_[True, st[1:] != st[:-1]]
    csum = np.cumsum(d)
    base = np.maximum.accumulate(np.where(new, np.r_[0, csum[:-1]], np.iinfo(np.int64).min))
    q = csum - base
    qrun[who[d > 0]] = q[d > 0]
    qker[who[d < 0]] = q[d < 0]
    return qrun, qker


def _sync_edges(w: Window, sync: np.ndarray, k: np.ndarray, s: np.ndarray, host: np.ndarray):
    """Stream / context synchronisation: the last work to end before the sync record ends on its
    stream (every stream of the rank for a context sync) → the end of the synchronising call."""
    src, dst = [], []
    hk = {(int(w.rank[h]), int(w.corr[h])): h for h in host if w.corr[h] >= 0}
    for e in sync:
        call = hk.get((int(w.rank[e]), int(w.corr[e])))
        if call is None:
            continue
        mine = (w.rank[k] == w.rank[e]) & (w.ts[k] <= w.end[e])
        if w.name[e] == STREAM_SYNC:
            mine &= w.thread[k] == w.thread[e]
        for st in np.unique(s[mine]):
            cand = k[mine & (s == st)]
            src.append(2 * cand[np.argmax(w.end[cand])] + 1)
            dst.append(2 * call + 1)
    return _edges(src, dst, np.zeros(len(src)), SYNC, -np.ones(len(src)))


def _join(w: Window, joins, n, src, dst, wt, et, at):
    """Route matched collective instances through a release node (see the module docstring)."""
    lasts = np.array([e for _, _, la in joins for e in la], np.int64)
    cut = (et == SPAN) & np.isin(src, 2 * lasts) & np.isin(dst, 2 * lasts + 1)
    keep = ~cut
    src, dst, wt, et, at = src[keep], dst[keep], wt[keep], et[keep], at[keep]
    s2, d2, w2, e2, a2, rts, rrank = [], [], [], [], [], [], []
    for j, (last_first, _firsts, last_kernels) in enumerate(joins):
        node = 2 * n + j
        release = int(w.ts[last_first])
        rts.append(release)
        rrank.append(int(w.rank[last_first]))
        s2.append(2 * last_first)
        d2.append(node)
        w2.append(0)
        e2.append(JOIN_IN)
        a2.append(last_first)
        for lk in last_kernels:
            s2.append(node)
            d2.append(2 * lk + 1)
            w2.append(max(int(w.end[lk]) - release, 0))
            e2.append(JOIN_OUT)
            a2.append(lk)
    return (
        np.concatenate([src, np.asarray(s2, np.int64)]),
        np.concatenate([dst, np.asarray(d2, np.int64)]),
        np.concatenate([wt, np.asarray(w2, np.int64)]),
        np.concatenate([et, np.asarray(e2, np.int8)]),
        np.concatenate([at, np.asarray(a2, np.int64)]),
        np.asarray(rts, np.int64),
        np.asarray(rrank, np.int32),
    )
