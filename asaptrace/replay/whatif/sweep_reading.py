"""A sweep's words: where its costs came from (:func:`costs_from`) and its plain reading with the
paper's numbers beside ours (:func:`reading`), both stored in the result and printed by every face.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asaptrace.replay.costs import CostModel
from asaptrace.replay.serving.scenario import COST_KNOBS, Scenario
from asaptrace.replay.whatif.sweep_result import headline_policy
from asaptrace.units import rps_text


def costs_from(sc: Scenario) -> str:
    """Where the scenario's costs came from, in words the reading quotes.

    * the shipped figures untouched: "the paper's own cost figures (docs/analyses/replay.md) at face value";
    * a ``--costs`` file: "the costs in FILE (fitted to STORE (…); fitted: attention, moe; kept
      the paper's defaults: transfer)" from its header line and its ``[fit]`` tables;
    * cost knobs that differ (from the paper's figures, or from the file when one was given) are
      named with their values, those set by ``--set`` marked so; ``cost_scale`` ≠ 1 is named last.
    """
    set_by_user = dict(sc.cost_set)
    if sc.cost_source.startswith("fitted to "):  # a store's fit, handed over in memory (advise --online)
        fitted = [p for p, q in (sc.cost_fit or {}).items() if q.get("status") == "fitted"]
        return f"the costs {sc.cost_source} (fitted: {', '.join(fitted) or 'none'})"
    if sc.cost_source.startswith("file "):
        inner = [sc.cost_origin or "no record of what it was fitted to"]
        if sc.cost_fit:
            fitted = [p for p, q in sc.cost_fit.items() if q.get("status") == "fitted"]
            kept = [p for p, q in sc.cost_fit.items() if q.get("status") != "fitted"]
            inner.append(f"fitted: {', '.join(fitted) or 'none'}")
            if kept:
                inner.append(f"kept the paper's defaults: {', '.join(kept)}")
        else:
            inner.append("no [fit] tables: hand-written, or not from replay --save-costs")
        text = f"the costs in {sc.cost_source.removeprefix('file ')} ({'; '.join(inner)})"
        changed = set_by_user
    else:
        text = "the paper's own cost figures (docs/analyses/replay.md)"
        paper = CostModel()
        changed = {k: getattr(sc, k) for k in COST_KNOBS if getattr(sc, k) != getattr(paper, k)}
    if changed:
        named = ", ".join(
            f"{k} = {v:g}" + (" (--set)" if k in set_by_user else " (scenario file)")
            for k, v in changed.items()
        )
        text += f" with {named}"
    if sc.cost_scale != 1:
        text += f", all × {sc.cost_scale:g} (cost_scale)"
    elif not changed and not sc.cost_source.startswith("file "):
        text += " at face value"
    return text


def reading(result: dict[str, Any]) -> str:
    """The plain-words reading of a result, with the paper's numbers beside ours."""
    pols = result["policies"]
    paper = result.get("paper") or {}
    ours = ", ".join(f"{p} {rps_text(result['slo_rps'][p], prose=True)}" for p in pols)
    text = f"SLO-compliant throughput (mean TTFT ≤ {result['slo_ttft_ns'] / 1e9:g} s): {ours}."
    over = result.get("slo_above_bound") or []
    if over:  # never clipped: said, as the defect it is
        text += (
            f" A seed of {', '.join(over)} served above 1.05 × its capacity bound: a defect of the"
            " steady state or of the cost model, not a throughput (please report it)."
        )
    source = result["costs_from"]
    from_paper = source.startswith("the paper's own cost figures")
    ref = paper.get("slo_rps") or {}
    head = headline_policy(pols)
    if ref and all(p in ref for p in pols) and head != pols[0] and result["ratios"].get(head) is not None:
        theirs = ", ".join(f"{p} {ref[p]:g}" for p in pols)
        ratio = result["ratios"][head]
        paper_ratio = ref[head] / ref[pols[0]]
        caveat = (
            "the paper does not say how it got from those figures to its numbers, and "
            if from_paper
            else "a fit holds for the store it was fitted to (its TP, its lengths, its hardware), and "
        )
        return (
            text
            + (
                f" The paper reports {theirs} RPS. Here {head}/{pols[0]} = {ratio:.2f}× against the "
                f"paper's {paper_ratio:.2f}×, from {source} and the knobs listed; {caveat}the ratio moves "
                "with k_s, E_ref, φ, the coupled routing and the cost scale (run with --vary to see how far)."
            )
            + _above_bounds(result, ref)
        )
    if ref and all(p in ref for p in pols):
        text += f" The paper reports {', '.join(f'{p} {ref[p]:g}' for p in pols)} RPS."
        if head != pols[0]:
            text += (
                f" No {head}/{pols[0]} ratio: a policy met the SLO at every rate swept (a lower bound)"
                " or missed it at the lowest; sweep a wider range of --rates."
            )
    return text + f" Costs: {source}."


def _above_bounds(result: dict[str, Any], paper_rps: dict[str, float]) -> str:
    """The paper's rates that no scheduler could serve on these costs and knobs: above the
    policy's capacity bound (the least work a request costs on its binding resource)."""
    cap = result.get("capacity") or {}
    over = [
        (p, paper_rps[p], cap[p])
        for p in result["policies"]
        if p in paper_rps and (cap.get(p) or {}).get("bound_rps") and paper_rps[p] > cap[p]["bound_rps"]
    ]
    if not over:
        return ""
    said = "; ".join(
        f"{p} {rps:g} against a bound of {rps_text(c['bound_rps'], prose=True)} ({c['binding']})"
        for p, rps, c in over
    )
    return f" On these costs and knobs no scheduler could serve the paper's {said}."


def question_of(sc: Scenario, opt: Any) -> str:
    """The question a sweep answers, in the words every face prints beside its numbers."""
    if opt.workload is not None and Path(opt.workload).is_dir():
        return "served under load, your lengths"
    if opt.workload is not None:
        return f"served under load, the requests of {Path(opt.workload).name}"
    if sc.name == "asap-paper" and opt.lengths == "fit":
        return "the paper's scenario"
    return f"scenario {sc.name}, lengths {opt.lengths}"
