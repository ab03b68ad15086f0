"""The advice as a human sees it (offline beside online, each what-if with its range, its fit and
the findings it answers) and as flat tables, at any width.

Narrower terminals get fewer columns, short what-if names and a legend (:func:`advice_legend`)
naming each in full, so no cell is ever cut.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from asaptrace.advise.advice import disagree
from asaptrace.info import deployment_phrase
from asaptrace.units import human_ns, rps_text
from asaptrace.views.replay import model_error_text
from asaptrace.views.sweep import BOUND_LEGEND, bound_text, range_rps_text
from asaptrace.views.table import ONLINE_QUESTION, REPLAY_QUESTION, TableView, flat_frame, narrow, rows_view

#: a finding's short name in the advice table (its full text is in the what-if's line)
ANSWER_SHORT = {
    "barrier_wait": "barrier wait",
    "sumsq_imbalance": "Σs² imbalance",
    "straggler_group": "straggler",
    "hot_expert": "hot expert",
    "slow_device": "slow device",
}


def answer_short(a: dict[str, Any]) -> str:
    """``Σs² imbalance``: a finding named in words, never by its internal code."""
    return ANSWER_SHORT.get(a["code"]) or a["label"].split(" (")[0]


def disagrees(w: dict[str, Any]) -> bool | None:
    """Whether a what-if's (JSON) offline and online answers point different ways: the rule
    :func:`asaptrace.advise.advice.disagree`, which its line words too. None without both."""
    return disagree(w.get("online") or {}, w.get("recovered_ns"))


def _has_online(j: dict[str, Any]) -> bool:
    return any((w.get("online") or {}).get("slo_rps") is not None for w in j["whatifs"])


def advice_header(j: dict[str, Any], store: Any) -> str:
    """The line above the advice: the store, its deployment and its measured makespan, and the
    reference replay's that every what-if is measured against when the two read differently (a
    disaggregated run's replay is not exact: its lines say "of 13.7 s" under a 13.4 s run)."""
    deployment = j.get("deployment_phrase") or deployment_phrase(
        {"deployment": j["deployment"]}, j["devices"]
    )
    if not j.get("measured_makespan_ns"):  # a CPU-only or MTIA trace: no device work to measure
        return f"{store}: {deployment}, no device work in the trace (nothing a what-if could win back):"
    measured = human_ns(j["measured_makespan_ns"], sig=True)
    ref = j.get("reference_makespan_ns")  # 0 or None: no what-if ran, none to measure against
    reference = human_ns(ref, sig=True) if ref else measured
    against = (
        "" if reference == measured else f" (the what-ifs are measured against its replay's {reference})"
    )
    return f"{store}: {deployment}, measured makespan {measured}{against}; what each change would win back:"


def advice_view(j: dict[str, Any], *, width: int | None = None) -> TableView:
    """The ranked what-ifs of an advice (its JSON), offline beside online: recovered time on these
    batches as they arrived (its range, against the reference replay's makespan), the findings each
    answers, and with ``--online`` its SLO throughput served under load (median over seeds, their
    range, its capacity bound), its ratio to the measured policy's, and whether the two agree.
    Narrow (``width`` < :data:`WIDE`): each what-if by its short name (:func:`advice_legend` names
    it in full), the range and the findings left to its line."""
    online, full = _has_online(j), not narrow(width)
    rows = []
    for i, w in enumerate((w for w in j["whatifs"] if w["applies"]), start=1):
        o = w.get("online") or {}
        agree = disagrees(w)
        offline = (
            (w["recovered_low_ns"], w["recovered_high_ns"], w["reference_ns"])
            if full
            else (w["recovered_low_ns"], w["recovered_high_ns"])
            if not online
            else ()
        )
        rows.append(
            (
                i,
                w["label"] if full else w["name"],
                w["recovered_ns"],
                *offline,
                *(
                    (
                        ", ".join(answer_short(a) for a in w.get("answers") or []) or "–",
                        "yes" if any(q.get("weak") for q in w.get("fit") or []) else "no",
                    )
                    if full
                    else ()
                ),
                *(
                    (
                        rps_text(o.get("slo_rps"), bool(o.get("censored")))
                        if o.get("slo_rps") is not None
                        else "–",
                        range_rps_text(o.get("range")),
                        bound_text(o),
                        None if o.get("ratio") is None else float(o["ratio"]),
                        "–" if agree is None else ("no" if agree else "yes"),
                    )
                    if online
                    else ()
                ),
            )
        )
    columns = {"rank": "#", "whatif": "what-if", "recovered_ns": "offline recovered"}
    if full:
        columns |= {"recovered_low_ns": "low", "recovered_high_ns": "high", "reference_ns": "of"}
        columns |= {"answers": "answers", "weak_fit": "weak fit"}
    elif not online:
        columns |= {"recovered_low_ns": "low", "recovered_high_ns": "high"}
    if online:
        who = (j.get("online") or {}).get("measured_policy", "coupled")
        columns |= {
            "slo_rps": "online RPS",
            "slo_range": "seeds",
            "bound": "bound",
            "ratio": f"vs {who if who == 'coupled' else 'measured'}",
            "agree": "agree",
        }
    dtypes = {c: pl.String for c in columns} | {
        c: pl.Int64 for c in columns if c.endswith("_ns") or c == "rank"
    }
    if online:
        dtypes["ratio"] = pl.Float64
    question = f"offline: {REPLAY_QUESTION}" + (f"; online: {ONLINE_QUESTION}" if online else "")
    return rows_view(
        f"Advice: what to change, and what it buys ({question})",
        columns,
        rows,
        name="advice",
        caption=" ".join(advice_legend(j, width=None)),
        dtypes=dtypes,
    )


def advice_legend(j: dict[str, Any], *, width: int | None = None) -> list[str]:
    """What the advice table's columns mean, one sentence each; narrow (``width`` < :data:`WIDE`)
    first names every what-if in full beside the short name the table gives it, one a line."""
    lines = []
    applying = [w for w in j["whatifs"] if w["applies"]]
    if narrow(width) and applying:
        lines += [f"{w['name']}: {w['label']}" for w in applying]
    lines.append(
        f"offline ({REPLAY_QUESTION}): recovered = the reference replay's makespan − the what-if's"
        " (negative: it loses time)"
        + (
            "; low/high: its range"
            if not narrow(width) or not _has_online(j)
            else "; its range is in its line"
        )
        + "."
    )
    on = j.get("online") or {}
    who = on.get("measured_policy", "coupled")
    base = (on.get("slo_rps") or {}).get(who)
    if _has_online(j) and base is not None:
        n = len(on.get("seeds") or [])
        cap = (on.get("capacity") or {}).get(who) or {}
        lines.append(
            f"online ({on.get('question', ONLINE_QUESTION)}): SLO RPS = requests/s at mean TTFT ≤ "
            f"{(on.get('slo_ttft_ns') or 0) / 1e9:g} s, median over {n} seeds; seeds: their min–max;"
            f" bound: the capacity bound, {BOUND_LEGEND}; vs {who if who == 'coupled' else 'measured'}:"
            f" online RPS / the measured policy's; agree: no when offline and online point different"
            " ways (its line says why)."
        )
        lines.append(
            f"measured policy {who}: {rps_text(base, bool((on.get('slo_censored') or {}).get(who)))}"
            f" requests/s (seeds {range_rps_text((on.get('slo_range') or {}).get(who))}; bound"
            f" {rps_text(cap.get('bound_rps'))}, the {cap.get('binding', '–')})."
            if cap.get("bound_rps") is not None
            else f" requests/s (seeds {range_rps_text((on.get('slo_range') or {}).get(who))}; no bound)."
        )
    if model_error_text(j):
        lines.append(model_error_text(j) + ".")
    return lines


def online_setup_line(j: dict[str, Any]) -> str:
    """What the online columns were served on: the requests, the costs, the seeds and arrivals
    (every number of the online answer is in the table, each beside its bound and range)."""
    on = j.get("online") or {}
    if on.get("status") != "run":
        return f"online: not run ({on.get('reason', '–')})"
    return (
        f"online: {on['requests']}; {on['costs_from']}; {len(on.get('seeds') or [])} seeds, at least"
        f" {on.get('min_arrivals', 0):,} arrivals and {on.get('duration_ns', 0) / 1e9:g} s of them a rate,"
        " every one drained; a rate whose backlog grew is not stable."
    )


def nothing_applies_text(j: dict[str, Any]) -> str:
    """Why no what-if applies to a store, in one line per distinct reason ("" when one applies)."""
    if any(w["applies"] for w in j["whatifs"]):
        return ""
    reasons = list(dict.fromkeys(w.get("reason") or "" for w in j["whatifs"]))
    if len(reasons) == 1:
        return f"No what-if applies to this store: {reasons[0]}."
    return (
        "No what-if applies to this store: "
        + "; ".join(f"{w['label']}: {w['reason']}" for w in j["whatifs"])
        + "."
    )


def advice_lines(j: dict[str, Any]) -> list[str]:
    """Every advice line, ranked, then one per what-if that does not apply (each from its numbers)."""
    return [w["line"] for w in j["whatifs"]]


def advice_tables(j: dict[str, Any]) -> dict[str, pl.DataFrame]:
    """``whatifs`` (one row per what-if, ranked, those that do not apply last) and ``answers``
    (one row per what-if × finding it answers)."""
    rows = []
    for rank, w in enumerate(j["whatifs"], start=1):
        o = w.get("online") or {}
        rows.append(
            {
                "rank": rank if w["applies"] else None,
                **{k: w.get(k) for k in ("name", "label", "policy", "applies", "reason")},
                **{k: w.get(k) for k in ("makespan_ns", "reference_ns", "recovered_ns")},
                **{
                    k: w.get(k)
                    for k in ("recovered_low_ns", "recovered_high_ns", "binding", "bandwidth_bound")
                },
                "weak_fit": any(q.get("weak") for q in w.get("fit") or []) if w["applies"] else None,
                "online_slo_rps": o.get("slo_rps"),
                "measured_slo_rps": o.get("measured_slo_rps"),
                "line": w["line"],
            }
        )
    whatifs = flat_frame(
        rows,
        {
            "rank": pl.Int64,
            "name": pl.String,
            "label": pl.String,
            "policy": pl.String,
            "applies": pl.Boolean,
            "reason": pl.String,
            "makespan_ns": pl.Int64,
            "reference_ns": pl.Int64,
            "recovered_ns": pl.Int64,
            "recovered_low_ns": pl.Int64,
            "recovered_high_ns": pl.Int64,
            "binding": pl.String,
            "bandwidth_bound": pl.Boolean,
            "weak_fit": pl.Boolean,
            "online_slo_rps": pl.Float64,
            "measured_slo_rps": pl.Float64,
            "line": pl.String,
        },
    )
    answers = flat_frame(
        [{"name": w["name"], **a} for w in j["whatifs"] for a in w.get("answers") or []],
        {"name": pl.String, "code": pl.String, "label": pl.String, "cost_ns": pl.Int64},
    )
    return {"whatifs": whatifs, "answers": answers}
