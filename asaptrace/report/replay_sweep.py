"""The report's Replay and Sweep sections, from what the replay and the sweep leave behind.

* :func:`replay_section`: a replayed store's ``meta.json`` ``replay`` block (docs/analyses/replay.md,
  "The replayed store") → the policy and its parameters, measured vs replayed step times, the
  recovered time by cause, each what-if number beside the reference replay's reproduction error,
  and the measured-vs-replayed comparison (``asaptrace.analyze.compare`` tables).
* :func:`sweep_section`: a sweep results object (docs/reference/sweep-json.md) → the TTFT curves
  with the SLO line, the p50/p99 TTFT per rate, the SLO-throughput table with the paper's numbers
  beside ours, the sweep's own reading, and the tornado when knobs were varied.

Pure: dicts and frames in, :class:`~asaptrace.report.sections.Section` out (the pipeline reads the
stores and files). Every string is rendered by the report's autoescaping templates.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath
from typing import Any

import polars as pl

from asaptrace.replay.whatif.replayed_store import REPLAY_KEYS
from asaptrace.report.sections import FigureView, Section
from asaptrace.units import human_ns
from asaptrace.views.compare import compare_views
from asaptrace.views.replay import band_text, consistency_text, deployment_text, replay_views
from asaptrace.views.sweep import sweep_views
from asaptrace.views.table import PAPER_QUESTION, REPLAY_QUESTION
from asaptrace.viz.replay import recovered_tornado, recovered_waterfall, replay_steps
from asaptrace.viz.sweep import sensitivity_tornado, ttft_curves, ttft_quantiles


def replay_json_of_block(block: dict[str, Any]) -> dict[str, Any]:
    """The replay block as the replay's JSON form (schema 2 keeps the makespans itself; a schema-1
    block of an older replayed store gets its totals as that schema summed them)."""
    if "makespan_ns" in block:
        return block
    steps = block.get("steps") or []
    totals = {k: sum(int(s[k]) for s in steps) for k in ("measured_ns", "reference_ns", "replayed_ns")}
    recovered = sum(int(v) for v in (block.get("recovered_ns") or {}).values())
    return {
        **block,
        **totals,
        "baseline_ns": totals["replayed_ns"] + recovered,
        "measured_makespan_ns": totals["measured_ns"],
        "reference_makespan_ns": totals["replayed_ns"] + recovered,
        "makespan_ns": totals["replayed_ns"],
    }


def _store_name(path: str | None) -> str:
    """The replayed store's source by its name (a full path would tie the report to one machine)."""
    return PurePath(path).name if path else "the measured store"


def replay_provenance(block: dict[str, Any] | None) -> str:
    """What a replayed store replays and its reproduction error, for the report's provenance ("" for
    a measured store)."""
    if not isinstance(block, dict) or not all(k in block for k in REPLAY_KEYS):
        return ""
    return (
        f"{_store_name(block.get('of'))} replayed under {block['policy']} "
        f"({_params_text(block.get('params'))}); {consistency_text(block)}"
    )


def _params_text(params: dict[str, Any] | None) -> str:
    shown = (f"{k}={'default' if v is None else v}" for k, v in (params or {}).items())
    return ", ".join(shown) or "defaults"


def replay_section(
    index: int,
    label: str,
    block: dict[str, Any],
    comparison: dict[str, pl.DataFrame] | None = None,
) -> Section:
    """The section of one replayed store (``label``: its name; ``comparison``: measured vs replayed,
    the tables of :func:`asaptrace.analyze.compare.compare` with a = measured, b = replayed)."""
    res = replay_json_of_block(block)
    sid = f"replay-{index}"
    dep = res.get("deployment") or {}
    on = (
        deployment_text(dep)
        if {"groups", "tp", "devices"} <= dep.keys()
        else f"{dep.get('kind', 'unknown')} deployment"
    )
    warnings = " ".join(f"Warning: {w}." for w in res.get("warnings") or [])
    text = (
        f"The question: {REPLAY_QUESTION}, under another deployment. "
        f"{label} replays {_store_name(res.get('of'))} under the {res['policy']} policy "
        f"({_params_text(res.get('params'))}) on {on}. Its makespan (first batch ready → last done) is "
        f"{human_ns(res['makespan_ns'])} against the reference replay's {human_ns(res['reference_makespan_ns'])}: "
        f"{band_text(res)}. {consistency_text(res)}. {warnings}"
    ).strip()

    views = replay_views(res)
    if comparison is not None:
        views += compare_views(comparison, "measured", "replayed")
    tables = [replace(view, name=f"{sid}-{view.name}") for view in views]
    figures = [
        FigureView(f"fig-{sid}-steps", replay_steps(res)),
        FigureView(f"fig-{sid}-recovered", recovered_waterfall(res)),
    ]
    if res.get("tornado"):
        figures.append(FigureView(f"fig-{sid}-tornado", recovered_tornado(res)))
    return Section(
        sid,
        f"Replay: {res['policy']} ({label})",
        text,
        figures=tuple(figures),
        tables=tuple(tables),
    )


def sweep_section(result: dict[str, Any], label: str) -> Section:
    """The Sweep section of a sweep results object (``label``: its file name)."""
    slo = result["slo_ttft_ns"]
    text = (
        f"The question: {result.get('question') or PAPER_QUESTION}. "
        f"{label}: scenario {result.get('scenario', '–')}, {result.get('workload', '–')}, "
        f"SLO mean TTFT ≤ {slo / 1e9:g} s. {result.get('reading') or ''}"
    ).strip()
    if not result.get("costs_from"):  # a schema_version 1 file: its reading assumed the paper's figures
        source = (result.get("knobs") or {}).get("cost_source", "–")
        text += f" (Costs: {source}; a schema_version 1 file does not record where they came from.)"
    warnings = result.get("cost_warnings") or []
    if warnings:
        text += " " + " ".join(f"Warning: {w}." for w in warnings)
    figures = [
        FigureView("fig-sweep-curves", ttft_curves(result)),
        FigureView(
            "fig-sweep-quantiles",
            ttft_quantiles(result),
            "the results keep the p50 and p99 TTFT of each rate (not every request's), so these are "
            "the points of each policy's TTFT CDF shown",
        ),
    ]
    tables = sweep_views(result)
    if result.get("vary"):
        figures.append(FigureView("fig-sweep-tornado", sensitivity_tornado(result)))
    return Section(
        "sweep", "Sweep: SLO-compliant throughput", text, figures=tuple(figures), tables=tuple(tables)
    )
