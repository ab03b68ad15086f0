"""The overlap finding (private to :mod:`asaptrace.analyze.findings`).

Its time at stake is the exposed communication per rank (communication with no compute running on
the device, :mod:`asaptrace.analyze.overlap`), so for the same communication a lower overlap
efficiency is never less severe. Part of that time may be exposed barrier wait, which the barrier
finding counts: the text says so (the same number as that finding, the rest transfer), and ``data``
carries ``counted_in`` and ``counted_ns`` so the ranking does not count it twice.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from asaptrace.units import percent, plural, text_ns


def overlap_findings(
    t: dict[str, pl.DataFrame], n_ranks: int, deployment: str | None, make: Any
) -> list[Any]:
    """The ``overlap`` finding (communication exposed) and, in a disaggregated run, ``utilisation``;
    ``make`` is the Finding type."""
    out = []
    ov, roles = t["overlap_by_rank"], t["overlap_by_role"]
    if ov.height == 0:
        return out
    comm = int(ov.get_column("comm_ns").sum())
    if comm:
        eff = ov.get_column("overlapped_ns").sum() / comm
        exposed = int(ov.get_column("exposed_comm_ns").sum())
        span = int(ov.get_column("span_ns").sum())
        # the exposed wait is the barrier (receive) finding's own number, the rest is transfer: the
        # two findings quote one measurement (exposed comm − the breakdown's transfer read 373 ms
        # where the receive-wait finding said 392 on a replayed store)
        has_wait = t["barrier_instances"].height or t["receive_waits"].height
        waited = min(int(t["step_breakdown"].get_column("wait_ns").sum()), exposed) if has_wait else 0
        transfer = exposed - waited
        text = (
            f"Overlap efficiency {percent(eff)}: of {text_ns(comm / n_ranks)} of communication per rank, "
            f"{text_ns(exposed / n_ranks)} is exposed"
        )
        if span:
            text += f" ({percent(exposed / span)} of the device span, no compute running)"
        data: dict[str, Any] = {
            "overlap_efficiency": eff,
            "comm_ns": comm,
            "exposed_comm_ns": exposed,
            "exposed_transfer_ns": transfer,
        }
        if waited:
            finding = "barrier-wait" if t["barrier_instances"].height else "receive-wait"
            text += (
                f", of which {text_ns(waited / n_ranks)} is exposed "
                f"{'barrier' if t['barrier_instances'].height else 'receive'} wait (counted in the "
                f"{finding} finding) and {text_ns(transfer / n_ranks)} transfer"
            )
            data |= {
                "counted_in": finding.replace("-", "_"),
                "counted_ns": waited // n_ranks,
            }
        out.append(make("overlap", "", text + ".", cost_ns=exposed // n_ranks, data=data))
    if deployment == "disaggregated" and roles.filter(pl.col("utilisation").is_not_null()).height:
        parts = [
            f"{r['role']} devices {percent(r['utilisation'])} busy ({plural(r['n_bubbles'], 'bubble')}"
            + (f", mean {text_ns(r['mean_bubble_ns'])})" if r["mean_bubble_ns"] is not None else ")")
            for r in roles.iter_rows(named=True)
            if r["utilisation"] is not None
        ]
        out.append(
            make(
                "utilisation",
                "info",
                "Utilisation by role: " + "; ".join(parts) + ".",
                data={"roles": roles.to_dicts()},
            )
        )
    return out
