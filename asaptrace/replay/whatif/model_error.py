"""How far the model is from the run it was fitted to: the measured deployment modelled back.

The reference replay of a coupled store re-runs its measured durations and matches by construction,
so it says nothing about the cost model. :func:`self_consistency` asks the model itself: the
store's own deployment rebuilt from its fitted costs (a coupled store: its D×T attention and EP dies
in lockstep, barrier at every dispatch and combine; a disaggregated store: its reference replay on
the fitted costs) against the measured makespan — "how far this model was from your run", shown
beside every answer (``model_error`` in ``replay`` and ``advise``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics.work import MeasuredWork
from asaptrace.replay.policies import Asap, Coupled, Policy


def reference_policy(wl: MeasuredWork) -> Policy:
    """The replay that must reproduce the measured run: its own deployment's semantics."""
    if wl.deployment == "coupled":
        return Coupled()
    return Asap(
        attention=f"{wl.n_groups}x{wl.tp}",
        experts=wl.expert_ranks,
        dual_batch=wl.micro_batches > 1,
        long_tokens=0,
        placement="measured",
    )


def measured_policy(wl: MeasuredWork) -> Policy:
    """The policy that describes how ``wl`` ran, on its deployment: a disaggregated store its
    reference replay's asap (its D×T + E, dual batch when it ran two micro-batches, no long-prompt
    rule) with FIFO placement; a coupled store its D×T attention and EP dies in lockstep, barrier
    at every dispatch and combine, built from the costs (``coupled`` itself would replay the other
    store's own groups)."""
    if wl.deployment == "coupled":
        return Asap(
            attention=f"{wl.n_groups}x{wl.tp}",
            experts=wl.expert_ranks,
            asynchronous=False,
            dual_batch=False,
            overlap=False,
            long_tokens=0,
        )
    return replace(reference_policy(wl), placement="fifo")


def pct_error(pred: float, meas: float) -> float | None:
    """(predicted − measured) / measured in % (3 decimals; None without a measured value)."""
    return round((pred - meas) / meas * 100, 3) if meas else None


def self_consistency(wl: MeasuredWork, costs: CostModel) -> dict[str, Any]:
    """The store's own deployment modelled from its fitted costs, against the run (makespans)."""
    if wl.deployment == "coupled":
        pol = measured_policy(wl)
        what = "the measured coupled deployment rebuilt in lockstep from the fitted costs"
    else:
        pol = reference_policy(wl)
        what = "the measured disaggregated deployment replayed on the fitted costs"
    made = pol.run(wl, costs).makespan_ns
    meas = int(wl.steps["end_ns"].max() - wl.steps["start_ns"].min())
    return {"what": what, "makespan_ns": int(made), "measured_ns": meas, "error": pct_error(made, meas)}
