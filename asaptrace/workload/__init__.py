"""Request workloads shared by synth and the serving sweep: prompt-length profiles derived from public
traces (:mod:`~asaptrace.workload.lengths`, ``data/lengths.toml``), request sets drawn from them or
read from a trace file (:mod:`~asaptrace.workload.requests`: Azure LLM inference CSV, Mooncake JSONL),
and the script that rebuilds the length tables (:mod:`~asaptrace.workload.derive_lengths`).

It sits low in the layers (it needs only numpy and the errors) so that ``synth`` and ``replay``
both read the same workloads without one importing the other sideways.
"""
