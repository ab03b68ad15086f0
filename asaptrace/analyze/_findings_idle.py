"""The idle finding (private to :mod:`asaptrace.analyze.findings`): the time the device did nothing,
and why (DOMAIN §9's idle causes, measured by :mod:`asaptrace.analyze.breakdown`).

Its time at stake is the idle time per rank (``step_breakdown``'s three idle parts), so its severity
follows its share of the step time like every other finding's. The text names the largest cause,
its share of the idle time, the host calls it came from (``idle_ops``) and where it was worst. No
other finding counts idle time: the barrier wait and exposed transfer are other parts of the step.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from asaptrace.analyze._idle import SHORT_KERNEL_NS
from asaptrace.units import percent, plural, text_ns

#: Idle time under this share of the step is not worth a sentence (a few µs between kernels)
MIN_IDLE_SHARE = 0.01

_CAUSES = {
    "idle_host_ns": "waiting on the host to launch the next kernel",
    "idle_sync_ns": "with the host blocked in a synchronisation",
    "idle_other_ns": "with no host cause in the trace (the next kernel was already launched and waited on a "
    "dependency or the driver, or the trace has no host side)",
}


def idle_findings(t: dict[str, pl.DataFrame], n_ranks: int, make: Any) -> list[Any]:
    """The ``idle`` finding, or none when the device idled under :data:`MIN_IDLE_SHARE` of the steps."""
    bd = t["step_breakdown"]
    if bd.height == 0 or "idle_ns" not in bd.columns:
        return []
    idle, total = int(bd.get_column("idle_ns").sum()), int(bd.get_column("step_time_ns").sum())
    if idle <= 0 or total <= 0 or idle / total < MIN_IDLE_SHARE:
        return []
    by_cause = {c: int(bd.get_column(c).sum()) for c in _CAUSES}
    cause = max(by_cause, key=lambda c: by_cause[c])
    n_steps = bd.select(pl.struct("step").n_unique()).item()
    each = "of each step" if n_steps > 1 else "of the step"
    share = idle / total
    text = (
        f"GPU idle {percent(share)} {each} ({text_ns(idle / n_ranks)} per rank of "
        f"{text_ns(total / n_ranks)}); {percent(by_cause[cause] / idle)} of it {_CAUSES[cause]}"
    )
    text += _evidence(t, bd, cause)
    worst = bd.sort("idle_ns", descending=True).row(0, named=True)
    if bd.height > 1:
        where = f"step {worst['step']}" if worst["step"] is not None else "work outside the steps"
        text += f". Most idle: rank {worst['rank']}, {where} ({text_ns(worst['idle_ns'])} of {text_ns(worst['step_time_ns'])})"
    data = {
        "idle_ns": idle,
        "step_time_ns": total,
        "idle_share": share,
        "cause": cause.removeprefix("idle_").removesuffix("_ns"),
        **by_cause,
        "worst_rank": worst["rank"],
        "worst_step": worst["step"],
    }
    return [make("idle", "", text + ".", cost_ns=idle // n_ranks, data=data)]


def _evidence(t: dict[str, pl.DataFrame], bd: pl.DataFrame, cause: str) -> str:
    """The calls behind the largest cause: the launches (how many before kernels too short to cover
    a launch) or the synchronising calls (the idle time each covered)."""
    ops = t.get("idle_ops", pl.DataFrame(schema={"cause": pl.String, "name": pl.String, "ns": pl.Int64}))
    if cause == "idle_host_ns":
        gaps, short = int(bd.get_column("n_host_gaps").sum()), int(bd.get_column("n_host_gaps_short").sum())
        text = f": {plural(gaps, 'gap')} before a late launch"
        if short:
            text += f", {short} of them before a kernel under {text_ns(SHORT_KERNEL_NS)} (launch-bound)"
        return text
    if cause == "idle_sync_ns":
        top = ops.filter(pl.col("cause") == "sync").head(3)
        if top.height:
            return ": " + ", ".join(f"{r['name']} {text_ns(r['ns'])}" for r in top.iter_rows(named=True))
    return ""
