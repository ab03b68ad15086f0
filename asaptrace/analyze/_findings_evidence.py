"""Findings weighed by their evidence (private to :mod:`asaptrace.analyze.findings`).

A cross-rank wait is a difference of two ranks' clocks: when the clock finding says the alignment
is unreliable (collective ends still disagree after it by more than
:data:`~asaptrace.analyze.findings.UNRELIABLE_RESIDUAL_NS`), a finding built on arrival order or
barrier wait cannot be trusted to rank above the measurements of one clock. It drops to ``info``,
keeps its numbers and says why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from asaptrace.units import text_ns

#: Findings whose numbers compare clocks across ranks (arrival order, barrier wait)
CROSS_RANK = frozenset({"barrier_wait", "straggler_group", "straggler_rank", "slow_device", "hot_expert"})


def unreliable_residual(t: dict[str, pl.DataFrame], meta: dict[str, Any], floor_ns: int) -> int | None:
    """The clock residual when it makes the alignment unreliable (above ``floor_ns``), else None."""
    c = t["clock"]
    status = (meta.get("clock") or {}).get("status")
    if c.height < 2 or status in ("replayed", "impossible") or c.get_column("residual_ns").is_null().all():
        return None
    resid = int(c.get_column("residual_ns").max())  # type: ignore[arg-type]
    return resid if resid > floor_ns else None


def weigh(findings: list[Any], resid: int | None) -> list[Any]:
    """Cross-rank findings to ``info`` with the reason, when the alignment is unreliable."""
    if resid is None:
        return findings
    why = (
        f" Not ranked: the clock alignment is unreliable (collective ends still disagree by up to "
        f"{text_ns(resid)}), so which rank arrived last and how long the others waited may be "
        "artefacts of the clocks."
    )
    return [
        replace(f, severity="info", text=f.text + why, data={**f.data, "unreliable_clock_ns": resid})
        if f.code in CROSS_RANK
        else f
        for f in findings
    ]
