"""The longest path through a window's graph, and the what-if that re-walks it (private).

The walk is networkx's ``dag_longest_path`` (what HTA calls): every node may start a path
(distance max(0, best predecessor + edge)), the path ends at the node of greatest distance, and it
is read back through each node's best predecessor. The nodes' topological order is computed once
(by time, ties by node id, falling back to Kahn's algorithm when a tie or a clock skew puts an edge
backwards) and kept, so a what-if re-walks the same order with other weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asaptrace.analyze._cp_graph import Graph


@dataclass
class Walk:
    """A walked graph: the order, the edges in walking order, and the path as edge indices."""

    order: np.ndarray  # node ids in topological order
    edge_order: np.ndarray  # edge indices sorted by the position of their destination
    length: int
    path_edges: np.ndarray  # edge indices on the path, first to last


class CycleError(ValueError):
    """The window's dependencies form a cycle (a trace whose clocks contradict its own order)."""


def topological_order(g: Graph) -> np.ndarray:
    """Node ids in an order where every edge points forward."""
    order = np.lexsort((np.arange(g.n_nodes), g.node_ts))
    pos = np.empty(g.n_nodes, np.int64)
    pos[order] = np.arange(g.n_nodes)
    if np.all(pos[g.src] < pos[g.dst]):
        return order
    return _kahn(g, order)


def _kahn(g: Graph, time_order: np.ndarray) -> np.ndarray:
    """Kahn's algorithm, taking ready nodes in time order (a heap keyed by their time position)."""
    import heapq

    rank = np.empty(g.n_nodes, np.int64)
    rank[time_order] = np.arange(g.n_nodes)
    indeg = np.bincount(g.dst, minlength=g.n_nodes)
    o = np.argsort(g.src, kind="stable")
    starts = np.searchsorted(g.src[o], np.arange(g.n_nodes + 1))
    succ = g.dst[o].tolist()
    starts_l = starts.tolist()
    indeg_l = indeg.tolist()
    rank_l = rank.tolist()
    heap = [(rank_l[v], v) for v in np.flatnonzero(indeg == 0).tolist()]
    heapq.heapify(heap)
    out = []
    while heap:
        _, u = heapq.heappop(heap)
        out.append(u)
        for i in range(starts_l[u], starts_l[u + 1]):
            v = succ[i]
            indeg_l[v] -= 1
            if indeg_l[v] == 0:
                heapq.heappush(heap, (rank_l[v], v))
    if len(out) != g.n_nodes:
        raise CycleError(f"the dependencies of the window form a cycle ({g.n_nodes - len(out)} nodes in it)")
    return np.asarray(out, np.int64)


def walk(g: Graph, weight: np.ndarray | None = None, order: np.ndarray | None = None) -> Walk:
    """Longest path (networkx's rule, see the module docstring) with ``weight`` (default: the graph's)."""
    w = g.weight if weight is None else weight
    order = topological_order(g) if order is None else order
    pos = np.empty(g.n_nodes, np.int64)
    pos[order] = np.arange(g.n_nodes)
    eo = np.lexsort((np.arange(len(g.src)), pos[g.dst]))
    dist = [0] * g.n_nodes
    best = [-1] * g.n_nodes  # best incoming edge
    src, dst, wl = g.src[eo].tolist(), g.dst[eo].tolist(), w[eo].tolist()
    for i, (u, v, x) in enumerate(zip(src, dst, wl, strict=True)):
        d = dist[u] + x
        if d > dist[v] or (best[v] < 0 and d >= 0):
            dist[v] = d
            best[v] = i
    da = np.asarray(dist, np.int64)
    # the end: the first node of greatest distance in topological order
    end = int(order[np.argmax(da[order])]) if g.n_nodes else -1
    path = []
    v = end
    while v >= 0 and best[v] >= 0:
        path.append(best[v])
        v = src[best[v]]
    path_edges = eo[np.asarray(path[::-1], np.int64)] if path else np.zeros(0, np.int64)
    return Walk(order, eo, int(da[end]) if g.n_nodes else 0, path_edges)


def rewalk_length(g: Graph, walked: Walk, weight: np.ndarray) -> int:
    """The path's length with other edge weights (the same order; only the length)."""
    return walk(g, weight, walked.order).length
