"""What HolisticTraceAnalysis makes of a folder of Kineto traces, as JSON on stdout (run as a script).

Run in its own process by tests/test_export_interop.py: HTA parses ranks in a *fork* pool, which a
test process that has already started polars' threads must not do, and its logging stays out of
the test's. For every rank HTA found: the file it took for that rank, its GPU kernels (HTA's own
``GPUKernelFilter``: a stream and a correlation), their streams, the kernels HTA linked to a CPU
launch (``index_correlation > 0``) and the slices of category ``barrier_wait``.

    python tests/_hta_probe.py TRACE_DIR
"""

import json
import sys

from hta.common.trace_filter import GPUKernelFilter
from hta.trace_analysis import TraceAnalysis

analysis = TraceAnalysis(trace_dir=sys.argv[1])
trace = analysis.t
symbols = trace.symbol_table.get_sym_table()
out = {}
for rank, df in sorted(trace.get_all_traces().items()):
    kernels = GPUKernelFilter()(df, trace.symbol_table)
    cats = df["cat"].map(lambda i: symbols[i])
    out[int(rank)] = {
        "file": trace.trace_files[rank],
        "kernels": len(kernels),
        "streams": sorted(int(s) for s in kernels["stream"].unique()),
        "launched": int((kernels["index_correlation"] > 0).sum()),
        "waits": int((cats == "barrier_wait").sum()),
    }
print(json.dumps(out))
