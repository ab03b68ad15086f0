"""What the kernel-level dependencies cost the lockstep walk: one 61-layer step on 32 ranks.

Baseline, measured in the same run on the same costs: the instance chain (``chain_from_costs``,
one position per barrier). Under test: the same step with the coupled program's dependencies on
(``KernelDeps``: dense first layers, shared expert, host blocking, launch cost and latency: one
position per kernel), and synth's full DeepEP program (router, count exchange, step all-gather).
Each figure is the best of ``--repeat`` runs (build + ``run_chain``).

Run: ``.venv/bin/python benchmarks/chain.py [--micro-batches 1|2] [--repeat N]``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np

from asaptrace.replay.mechanics.lockstep import (
    KernelDeps,
    chain_from_costs,
    chain_from_costs_two_mb,
    run_chain,
)
from asaptrace.replay.mechanics.program import ProgramShape, coupled_program

GROUPS, TP, LAYERS = 8, 4, 61


def _best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--micro-batches", type=int, choices=(1, 2), default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    m, r_n = args.micro_batches, GROUPS * TP
    rng = np.random.default_rng(0)
    attn = rng.integers(5_000_000, 30_000_000, (m, GROUPS, LAYERS))
    moe = rng.integers(500_000, 2_000_000, (m, r_n, LAYERS))
    x = np.full((m, LAYERS), 900_000, np.int64)
    shared = np.full((m, r_n, LAYERS), 300_000, np.int64)
    deps = KernelDeps(
        dense_layers=3, shared_ns=shared, host_blocking=True, launch_ns=6_000, launch_latency_ns=4_000
    )

    def build(d: KernelDeps):
        if m == 1:
            return chain_from_costs(attn[0], moe[0], x[0], x[0], tp=TP, deps=d)
        return chain_from_costs_two_mb(attn, moe, x, x, tp=TP, deps=d)

    group = np.arange(r_n) // TP

    def cost(op: str, layer: int, mb: int):
        if op == "attention":
            return attn[mb][group, layer]
        if op in ("moe", "dense_mlp", "gate", "layout", "shared_expert"):
            return moe[mb][:, layer]
        return 900_000

    full = ProgramShape(
        layers=LAYERS,
        micro_batches=m,
        dense_layers=3,
        router=True,
        count_exchange=True,
        host_blocking=True,
        shared_expert=True,
        step_collective=True,
        launch_ns=6_000,
        launch_latency_ns=4_000,
    )
    base = _best(lambda: run_chain(build(KernelDeps())), args.repeat)
    kern = _best(lambda: run_chain(build(deps)), args.repeat)
    synth = _best(lambda: run_chain(coupled_program(full, cost, ranks=r_n)), args.repeat)
    k_inst, k_kern = build(KernelDeps()).n_instances, build(deps).n_instances
    k_full = coupled_program(full, cost, ranks=r_n).n_instances
    print(f"one step: {GROUPS}x{TP} ranks, {LAYERS} layers, {m} micro-batch(es), best of {args.repeat}")
    print(f"  instance chain (baseline)   {base * 1e3:8.2f} ms   {k_inst:5d} positions")
    print(f"  with KernelDeps             {kern * 1e3:8.2f} ms   {k_kern:5d} positions   {kern / base:5.2f}x")
    print(
        f"  synth's DeepEP program      {synth * 1e3:8.2f} ms   {k_full:5d} positions   {synth / base:5.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
