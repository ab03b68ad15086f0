"""HTA's critical path of one annotation instance, as JSON on stdout (run as a script).

Run in its own process by tests/test_analyze_critical_hta.py (HTA parses ranks in a fork pool and
logs freely). HTA 0.5 calls ``DataFrame.drop(axis=1, columns=…)``, which pandas ≥ 3 refuses; the
call is forwarded without ``axis`` (what it meant) so HTA's own algorithm runs unchanged.

    python tests/_hta_critical.py TRACE_DIR ANNOTATION INSTANCE

Prints {"ok", "length", "kernels": [[name, correlation, dur], …]} — HTA's path length (the sum of
its edges' weights, in HTA's time unit) and the device spans on it.
"""

import itertools
import json
import sys

import pandas as pd

_drop = pd.DataFrame.drop


def _drop_compat(self, labels=None, *, axis=0, index=None, columns=None, **kw):
    if columns is not None or index is not None:
        return _drop(self, labels, index=index, columns=columns, **kw)
    return _drop(self, labels, axis=axis, **kw)


pd.DataFrame.drop = _drop_compat

from hta.trace_analysis import TraceAnalysis  # noqa: E402

trace_dir, annotation, instance = sys.argv[1], sys.argv[2], int(sys.argv[3])
analysis = TraceAnalysis(trace_dir=trace_dir)
rank = sorted(analysis.t.get_all_traces())[0]
graph, ok = analysis.critical_path_analysis(rank=rank, annotation=annotation, instance_id=instance)
path = graph.critical_path_nodes
length = sum(graph.edges[u, v]["weight"] for u, v in itertools.pairwise(path))
df = analysis.t.get_trace(rank)
symbols = analysis.t.symbol_table.get_sym_table()
kernels = []
for e in graph.critical_path_edges_set:
    if e.type.value != "critical_path_operator":
        continue
    ev = graph.get_event_attribution_for_edge(e)
    row = df.loc[ev]
    if row["stream"] != -1:
        kernels.append([symbols[int(row["name"])], int(row["correlation"]), float(row["dur"])])
print(json.dumps({"ok": bool(ok), "length": float(length), "kernels": sorted(kernels)}))
