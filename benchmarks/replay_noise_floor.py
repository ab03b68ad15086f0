"""How far a one-step twin's makespan moves from one draw of the noise to the next, and so how
close any prediction can land on one twin (docs/analyses/replay.md, "The noise floor of a twin").

For each workload seed (the requests) and each noise seed (``[run] noise_seed``: the kernel noise
and the routing drawn again, the same requests and clocks), the coupled run is fitted and each
ASAP split predicted against the same split run disaggregated at the same noise seed (the test
twins' shape: 12 layers, one step, clocks agreeing). Printed per split: the twins' own spread
(cv of their makespans), the predictions' spread, the mean error over the draws (the model's
bias), the error's standard deviation, how many draws miss 5 %, and the Monte-Carlo band's
coverage. Usage::

    python benchmarks/replay_noise_floor.py                        # workloads 1-3 × noise 11-16, σ 0.2
    python benchmarks/replay_noise_floor.py --contention 0.5 --workloads 4 --noise 11 12 13
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests._synth_helpers import predict_asap, twin_work, work_makespan

SPLITS = [(4, 4, 16), (4, 4, 8), (4, 4, 32), (8, 4, 16)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sigma", type=float, default=0.2)
    ap.add_argument("--contention", type=float, default=0.0)
    ap.add_argument("--workloads", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--noise", type=int, nargs="+", default=[11, 12, 13, 14, 15, 16])
    ap.add_argument(
        "--routing-skew", type=float, default=None, help="[straggler] routing_skew (0: no per-layer hot die)"
    )
    ap.add_argument(
        "--root", type=Path, default=None, help="keep the twins here (default: a temporary folder)"
    )
    a = ap.parse_args()
    err: dict[tuple, list[float]] = {s: [] for s in SPLITS}
    cov: dict[tuple, list[bool]] = {s: [] for s in SPLITS}
    cv_twin: dict[tuple, list[float]] = {s: [] for s in SPLITS}
    cv_pred: dict[tuple, list[float]] = {s: [] for s in SPLITS}
    with tempfile.TemporaryDirectory() as tmp:
        root = a.root or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        for w in a.workloads:
            twins: dict[tuple, list[int]] = {s: [] for s in SPLITS}
            preds: dict[tuple, list[int]] = {s: [] for s in SPLITS}
            for nz in a.noise:
                kw = {"seed": w, "noise_seed": nz, "routing_skew": a.routing_skew, "offset_max_us": 0}
                measured = twin_work(root, a.sigma, None, **kw)
                for split in SPLITS:
                    truth = work_makespan(twin_work(root, a.sigma, split, contention=a.contention, **kw))
                    r = predict_asap(measured, split)
                    twins[split].append(truth)
                    preds[split].append(r.makespan_ns)
                    err[split].append(100 * (r.makespan_ns - truth) / truth)
                    cov[split].append(r.band.get("mc_low_ns", 0) <= truth <= r.band.get("mc_high_ns", 0))
            for split in SPLITS:
                cv_twin[split].append(100 * np.std(twins[split]) / np.mean(twins[split]))
                cv_pred[split].append(100 * np.std(preds[split]) / np.mean(preds[split]))
    n = len(a.workloads) * len(a.noise)
    skew = "" if a.routing_skew is None else f", routing skew {a.routing_skew}"
    print(
        f"σ {a.sigma}, contention {a.contention}{skew}: {len(a.workloads)} workloads × {len(a.noise)} draws"
    )
    print("| split | twin cv | prediction cv | mean error | sd of error | beyond 5 % | in the band |")
    print("|---|---|---|---|---|---|---|")
    for split in SPLITS:
        e = np.array(err[split])
        print(
            f"| {split[0]}×{split[1]}+{split[2]} | {np.mean(cv_twin[split]):.1f} % | "
            f"{np.mean(cv_pred[split]):.1f} % | {e.mean():+.2f} % | {e.std():.2f} % | "
            f"{int((abs(e) > 5).sum())}/{n} | {sum(cov[split])}/{n} |"
        )


if __name__ == "__main__":
    main()
