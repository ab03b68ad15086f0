"""How fast the replay simulates, and how its time grows with devices (32, 128, 384) and layers.

Workloads are built from the cost model (DOMAIN §3 figures, prompt lengths log-normal around 5K
tokens), so no trace has to be generated: for D devices, a coupled DP(D/4)×TP4 deployment and an
ASAP one of (D/8)×4 attention dies + D/2 expert dies, two batches per group per step. Timed:

* lockstep — the coupled replay (``run_chain`` over every step's chain of 2·L barriers);
* pipelined — the ASAP replay on the event engine (``run_pipeline``);
* baselines measured in the same run: a bare ``heapq`` push/pop loop over as many tuples as the
  engine handled events (the floor of any heap-based event loop in Python), and a bare numpy
  ``max`` over each chain's (instances × ranks) matrix (the floor of a vectorised lockstep step).

With ``--end-to-end`` it also synthesises a coupled 32-device, 61-layer run of ``--steps`` steps,
ingests it (not timed) and times ``replay_store`` (workload extraction + cost fit + reference and
policy replays, no store written) for coupled and asap, against reading the store's events table.

Prints seconds, simulated events/s and the ratio to the baseline. Usage::

    python benchmarks/replay.py                      # 32, 128, 384 devices; 61 layers; 10 steps
    python benchmarks/replay.py --devices 32 --layers 16 61 122
    python benchmarks/replay.py --devices 32 --end-to-end
"""

from __future__ import annotations

import argparse
import heapq
import tempfile
import time
from pathlib import Path

import numpy as np

from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.formers import Batch, StaticBatches, batch_costs
from asaptrace.replay.mechanics.lockstep import chain_from_costs, run_chain
from asaptrace.replay.mechanics.pipeline_run import run_pipeline
from asaptrace.replay.mechanics.pipelined import PipelineConfig

TP = 4


def lengths(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.clip(rng.lognormal(np.log(4000), 0.8, n), 31, 32_768).astype(np.int64)


def coupled_chains(devices: int, layers: int, steps: int, costs: CostModel, rng: np.random.Generator):
    groups = devices // TP
    chains = []
    for step in range(steps):
        attn = np.zeros((groups, layers), np.int64)
        tokens = 0.0
        for g in range(groups):
            s = lengths(rng, 4)
            attn[g] = costs.attention_ns(s)
            tokens += float(s.sum())
        moe = np.full(layers, int(costs.moe_ns(tokens, devices)))
        xfer = np.full(layers, int(costs.transfer_ns(tokens / groups / TP)))
        chains.append(chain_from_costs(attn, moe, xfer, xfer, tp=TP, step=step))
    return chains


def asap_batches(
    devices: int, layers: int, steps: int, costs: CostModel, rng: np.random.Generator
) -> list[Batch]:
    groups = max(devices // 8, 1)
    out = []
    for step in range(steps):
        for j in range(2 * groups):
            s = lengths(rng, 2)
            a, d, m, c = batch_costs(
                costs, s, np.zeros(len(s)), layers=layers, dense_layers=3, tp=TP, experts=devices // 2
            )
            out.append(Batch(len(out), step * 10**9, a, d, m, c, step=step, key=(step, j, 0)))
    return out


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def heap_floor(n: int) -> float:
    t = time.perf_counter()
    h: list[tuple[int, int, int]] = []
    for i in range(n):
        heapq.heappush(h, (i % 997, 1, i))
    while h:
        heapq.heappop(h)
    return time.perf_counter() - t


def numpy_floor(chains) -> float:
    t = time.perf_counter()
    for ch in chains:
        for k in range(ch.gap.shape[0]):
            ch.gap[k].max()
    return time.perf_counter() - t


def end_to_end(steps: int) -> None:
    from asaptrace.ingest.driver import ingest_paths
    from asaptrace.pipeline import enrich_store, replay_store
    from asaptrace.synth import load_config, synthesize

    work = Path(tempfile.mkdtemp(prefix="asaptrace-bench-replay-"))
    run = synthesize(load_config("coupled", steps=steps, fmt="kineto"), work / "run")
    store = enrich_store(ingest_paths([run.out_dir / "kineto"], work / "run.store"))
    _, base = timed(lambda: store.read("events"))
    print(f"\nend to end: coupled 32 devices, 61 layers, {steps} steps; baseline (read events) {base:.3f} s")
    for policy in ("coupled", "asap"):
        r, t = timed(lambda policy=policy: replay_store(store.path, policy, attribute=False))
        print(
            f"  replay_store {policy:<8} {t:6.3f} s  ratio {t / base:5.1f}  ({r.events:,} simulated events)"
        )
    r, t = timed(lambda: replay_store(store.path, "asap"))
    print(f"  replay_store asap with recovered-time attribution {t:6.3f} s  ratio {t / base:5.1f}")
    r, t = timed(lambda: replay_store(store.path, "asap", split="auto"))
    print(
        f"  replay_store asap --split auto ({len(r.splits)} splits, then attribution and band) "
        f"{t:6.3f} s  ratio {t / base:5.1f}  (goal < 10 s)"
    )
    r, t = timed(
        lambda: replay_store(store.path, "asap", vary=["k_s=1,2,4", "scale=0.5,1,2"], attribute=False)
    )
    print(f"  replay_store asap --vary k_s (3) --vary scale (3) {t:6.3f} s  ratio {t / base:5.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, nargs="+", default=[32, 128, 384])
    ap.add_argument("--layers", type=int, nargs="+", default=[61])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--end-to-end", action="store_true", help="also time replay_store on a synthesised store")
    args = ap.parse_args()
    costs = CostModel()
    print(
        f"{'devices':>7} {'layers':>6} {'mechanics':>9} {'seconds':>8} {'events':>9} {'events/s':>11} {'baseline s':>10} {'ratio':>6}"
    )
    for layers in args.layers:
        for devices in args.devices:
            rng = np.random.default_rng(0)
            chains = coupled_chains(devices, layers, args.steps, costs, rng)
            _, t_lock = timed(lambda chains=chains: [run_chain(ch) for ch in chains])
            ev_lock = sum(int(ch.part.sum()) for ch in chains)
            base_lock = numpy_floor(chains)
            print(
                f"{devices:>7} {layers:>6} {'lockstep':>9} {t_lock:>8.3f} {ev_lock:>9,} {ev_lock / t_lock:>11,.0f} "
                f"{base_lock:>10.3f} {t_lock / base_lock:>6.1f}"
            )
            batches = asap_batches(devices, layers, args.steps, costs, rng)
            cfg = PipelineConfig(groups=max(devices // 8, 1), slots=2)
            tr, t_pipe = timed(
                lambda b=batches, cfg=cfg: run_pipeline(cfg, StaticBatches(b, groups=cfg.groups))
            )
            base_pipe = heap_floor(tr.events)
            print(
                f"{devices:>7} {layers:>6} {'pipelined':>9} {t_pipe:>8.3f} {tr.events:>9,} {tr.events / t_pipe:>11,.0f} "
                f"{base_pipe:>10.3f} {t_pipe / base_pipe:>6.1f}"
            )
    if args.end_to_end:
        end_to_end(args.steps)


if __name__ == "__main__":
    main()
