"""How far a coupled run's prediction of an ASAP split lands from a twin with kernel noise and link
contention, and whether the Monte-Carlo band covers it (the table in docs/analyses/replay.md).

Twins are synth's own runs of the same requests (12 layers, one step, 131072 tokens, seed 3,
clocks agreeing): the coupled run (kernel noise σ; a coupled run has no link contention) is
fitted and each ASAP split predicted; the twin is that split run disaggregated with the same σ
and link contention κ (a send × (1 + κ·n in flight), :mod:`asaptrace.synth.contention`). Printed
per (σ, κ, split): the prediction's error against the twin's makespan, and the band (its edges
relative to the twin) with and without the contention prior (``--no-prior`` for without only).
With ``--measured-split`` the measured run is that ASAP split instead (κ is then fitted from its
sends). Usage::

    python benchmarks/replay_contention.py                     # σ 0.1 0.2 0.3 × κ 0 0.25 0.5
    python benchmarks/replay_contention.py --sigma 0.2 --contention 0.5 --measured-split 4x4x16
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from asaptrace.replay import contention
from asaptrace.replay.costs import fit_costs
from asaptrace.replay.mechanics.work import MeasuredWork
from asaptrace.replay.whatif.run import replay_measured_work

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests._synth_helpers import twin_work
from tests._synth_helpers import work_makespan as makespan

SPLITS = [(4, 4, 16), (4, 4, 8), (4, 4, 32), (8, 4, 16)]


def twin(root: Path, sigma: float, contention: float, split: tuple[int, int, int] | None) -> MeasuredWork:
    """The test twins' run (tests/test_replay_contention.py): coupled when ``split`` is None."""
    return twin_work(root, sigma, split, contention=contention if split else 0.0, offset_max_us=0)


def predict(wl: MeasuredWork, split: tuple[int, int, int], prior: bool = True):
    """The ASAP prediction of ``split``; ``prior`` False: the band without the contention prior
    (its κ range set to [0, 0]: every draw κ = 0, the band of before)."""
    d, t, e = split
    params = {"attention": f"{d}x{t}", "experts": e, "long_tokens": 0, "dual_batch": d < 8}
    kept = contention.CONTENTION_PRIOR
    contention.CONTENTION_PRIOR = kept if prior else (0.0, 0.0)
    try:
        return replay_measured_work(wl, "asap", params=params, attribute=False)
    finally:
        contention.CONTENTION_PRIOR = kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sigma", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    ap.add_argument("--contention", type=float, nargs="+", default=[0.0, 0.25, 0.5])
    ap.add_argument("--measured-split", default="", help="DxTxE: fit an ASAP twin instead of the coupled run")
    ap.add_argument("--no-prior", action="store_true", help="only the band without the contention prior")
    ap.add_argument(
        "--root", type=Path, default=None, help="keep the twins here (default: a temporary folder)"
    )
    a = ap.parse_args()
    ms = tuple(int(v) for v in a.measured_split.split("x")) if a.measured_split else None
    with tempfile.TemporaryDirectory() as tmp:
        root = a.root or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        print("| σ | κ | split | error | band (no prior) | covers | band (prior) | covers | fitted κ |")
        print("|---|---|---|---|---|---|---|---|---|")
        for sigma in a.sigma:
            for kappa in a.contention:
                measured = twin(root, sigma, kappa, ms)
                fitted = fit_costs(measured).model.xfer_contention
                for split in SPLITS:
                    truth = makespan(twin(root, sigma, kappa, split))
                    cells = []
                    for prior in (False,) if a.no_prior else (False, True):
                        r = predict(measured, split, prior)
                        lo, hi = r.band.get("mc_low_ns", 0), r.band.get("mc_high_ns", 0)
                        err = 100 * (r.makespan_ns - truth) / truth
                        cells += [f"{100 * (lo - truth) / truth:+.1f} … {100 * (hi - truth) / truth:+.1f} %"]
                        cells += ["yes" if lo <= truth <= hi else "**no**"]
                    print(
                        f"| {sigma} | {kappa} | {split[0]}×{split[1]}+{split[2]} | {err:+.2f} % | "
                        + " | ".join(cells)
                        + f" | {fitted:.3f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
