"""synth's coupled traces are the replay's coupled program: its dependencies show in the kernels.

The tiny coupled run (6 layers, the first 2 dense, 2 × 2 ranks, two micro-batches) with noise off;
launch cost 6 µs and launch latency 4 µs (the defaults).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from asaptrace.synth.run import build_timeline
from asaptrace.synth.timeline import OP_CODE
from tests._synth_helpers import tiny


def _kernels(cfg):
    tl = build_timeline(cfg)
    by = defaultdict(list)  # (step, layer, mb, op) → [(rank, start, end, launch)]
    for r, op, s, d, la, st, ly, mb in zip(
        tl.k_rank, tl.k_op, tl.k_start, tl.k_dur, tl.k_launch, tl.k_step, tl.k_layer, tl.k_mb, strict=True
    ):
        by[(int(st), int(ly), int(mb), int(op))].append((int(r), int(s), int(s + d), int(la)))
    return tl, by


def test_the_host_waits_for_the_count_exchange_before_the_shared_expert():
    # DeepEP's normal dispatch: the host reads notify_dispatch's counts, then launches the payload
    # dispatch (at notify's end) and the shared expert (6 µs later), which starts 4 µs after its
    # launch: notify end + 10 µs — although its input (the gate) was ready long before.
    _, by = _kernels(tiny(costs={"jitter": 0.0}))
    notify, shared, gate = OP_CODE["notify"], OP_CODE["shared_expert"], OP_CODE["gate"]
    n = 0
    for (step, layer, mb, op), rows in by.items():
        if op != shared:
            continue
        n_end = {r: e for r, _, e, _ in by[(step, layer, mb, notify)]}
        g_end = {r: e for r, _, e, _ in by[(step, layer, mb, gate)]}
        for r, s, _, launch in rows:
            assert launch == n_end[r] + 6_000 and s == n_end[r] + 10_000
            assert g_end[r] < n_end[r]
            n += 1
    assert n == 2 * 4 * 2 * 4  # steps × MoE layers × micro-batches × ranks


def test_dense_layers_run_without_collectives_and_every_kernel_waits_for_its_launch():
    tl, by = _kernels(tiny(costs={"jitter": 0.0}))
    comm = {OP_CODE[o] for o in ("notify", "dispatch", "combine")}
    ops_of = defaultdict(set)
    for _step, layer, _mb, op in by:
        ops_of[layer].add(op)
    assert ops_of[0] == ops_of[1] == {OP_CODE["attention"], OP_CODE["dense_mlp"]}  # layers 0, 1: dense
    assert all(comm <= ops_of[layer] for layer in range(2, 6))
    # no kernel starts before its launch + 4 µs latency, and the host launches one every 6 µs
    assert (tl.k_start >= tl.k_launch + 4_000).all()
    assert set(np.unique(tl.k_launch_dur).tolist()) == {6_000}
