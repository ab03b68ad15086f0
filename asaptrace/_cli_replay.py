"""Formatting for ``asaptrace replay`` (kept out of cli.py so the command stays parse → call → format)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from asaptrace._cli_common import human_ns, out
from asaptrace.replay.api import ReplayResult


def replay_params(**options: Any) -> dict[str, Any]:
    """CLI options → policy parameters (None = the policy's default; --no-X flags → X=False)."""
    params = {k: v for k, v in options.items() if v is not None and not k.startswith("no_")}
    for flag in ("dual_batch", "overlap", "super_kernel"):
        if options.get(f"no_{flag}"):
            params[flag] = False
    if not params.get("expert_failure"):
        params.pop("expert_failure", None)
    return params


def _pct(a: int, b: int) -> str:
    return f"{100 * (a - b) / b:+.1f}%" if b else "-"


def print_replay(r: ReplayResult) -> None:
    dep = r.deployment
    shape = (
        f"{dep['groups']}×{dep['tp']} attention + {dep['experts']} expert dies"
        if dep["kind"] == "disaggregated"
        else f"DP{dep['groups']}×TP{dep['tp']} coupled"
    )
    err = f"{r.reference_policy} reproduction error {r.error_mean_pct:.2f}% mean, {r.error_max_pct:.2f}% max"
    out.print(
        f"[bold]{r.store}[/] replayed as [bold]{r.policy}[/] ({shape}, {r.events:,} events in {r.seconds:.2f} s)"
    )
    steps = Table(
        "step",
        "measured",
        r.reference_policy + " replay",
        r.policy,
        "vs measured",
        title="step time",
        title_justify="left",
    )
    for s in r.steps:
        steps.add_row(
            str(s["step"]),
            human_ns(s["measured_ns"]),
            human_ns(s["reference_ns"]),
            human_ns(s["replayed_ns"]),
            _pct(s["replayed_ns"], s["measured_ns"]),
        )
    steps.add_row(
        "all",
        human_ns(r.measured_ns),
        human_ns(r.reference_ns),
        human_ns(r.replayed_ns),
        _pct(r.replayed_ns, r.measured_ns),
    )
    out.print(steps)
    if r.recovered_ns:
        causes = Table(
            "cause",
            "recovered",
            "share of coupled",
            title=f"recovered time by cause (± {r.error_max_pct:.1f}%: {err})",
            title_justify="left",
        )
        for cause, ns in r.recovered_ns.items():
            causes.add_row(
                cause.replace("_", " "),
                human_ns(ns),
                f"{100 * ns / r.baseline_ns:+.1f}%" if r.baseline_ns else "-",
            )
        total = sum(r.recovered_ns.values())
        causes.add_row(
            "total", human_ns(total), f"{100 * total / r.baseline_ns:+.1f}%" if r.baseline_ns else "-"
        )
        out.print(causes)
    out.print(f"{err}; simulated barrier wait {human_ns(r.simulated_wait_ns)}; costs: {r.costs['source']}")
    if r.cost_fit:
        fit = ", ".join(f"{k} R² {v['r2']:.2f}" for k, v in r.cost_fit.items() if "r2" in v)
        if fit:
            out.print(f"[dim]cost fit: {fit}[/]")
    for note in r.notes:
        out.print(f"[dim]note: {note}[/]")
    if r.out:
        out.print(f"wrote [bold]{r.out}[/]")
