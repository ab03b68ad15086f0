"""What a human sees of the what-if answers: the sweep's (the paper's scenario, or a workload served
under load) and the advice's (offline beside online), at any width.

Each number says which question it answers (:data:`QUESTIONS`): the offline replay "these batches as
they arrived", ``advise --online`` "served under load, your lengths", ``sweep`` "the paper's
scenario"; and every online number stands beside its capacity bound (binding resource named) and its
range over seeds. A view takes an optional terminal ``width``: ``None`` (the report, the dashboard,
a notebook) and ≥ :data:`WIDE` are complete; narrower terminals get fewer columns, short what-if
names and a legend (:func:`advice_legend`) naming each in full, so no cell is ever cut. Kept apart
from :mod:`asaptrace.views` (which it builds on) so neither module outgrows one concept.
"""

from __future__ import annotations

import textwrap
from typing import Any

import polars as pl

from asaptrace.units import rps_text
from asaptrace.views import REPLAY_QUESTION, TableView, _rows_view, deployment_text

#: the question each face's numbers answer, printed beside them (DOMAIN.md §7, §8)
ONLINE_QUESTION = "served under load, your lengths"
PAPER_QUESTION = "the paper's scenario"
QUESTIONS = {"replay": REPLAY_QUESTION, "advise --online": ONLINE_QUESTION, "sweep": PAPER_QUESTION}
#: a terminal this wide (columns) shows every column; narrower ones the short layout
WIDE = 120


def narrow(width: int | None) -> bool:
    """Whether a face of ``width`` columns gets the short layout (``None``: no terminal, complete)."""
    return width is not None and width < WIDE


def wrap(text: str, width: int | None, *, first: str = "", indent: str = "") -> list[str]:
    """``first + text`` wrapped to ``width`` columns between words, continuation lines indented by
    ``indent`` (one line when ``width`` is None): how the CLI prints a numbered line or a reading."""
    if width is None:
        return [first + text]
    return textwrap.wrap(
        text,
        max(width, 20),
        initial_indent=first,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=True,  # only a token longer than the terminal (a path) is cut
    ) or [first]


# --------------------------------------------------------------------------------------------- sweep
def sweep_header(res: Any) -> list[str]:
    """The lines above a sweep's tables: what was swept, the knobs and costs it assumed, the
    calibration and the length fit (each only when there is one)."""
    k = res.get("knobs") or {}
    lines = [
        f"sweep: scenario {res.get('scenario', '–')}, {res.get('workload', '–')}, "
        f"{res.get('duration_ns', 0) / 1e9:g} s per rate, SLO mean TTFT ≤ {res['slo_ttft_ns'] / 1e9:g} s, "
        f"seed {k.get('seed', '–')}"
    ]
    if k:
        served = res.get("policy_settings") or {}
        deps = ", ".join(
            f"{p} {deployment_text(s['deployment'], short=True)}"
            for p, s in served.items()
            if s.get("deployment")
        )
        lines.append(
            f"knobs assumed: k_s {k['coupled_k_s']:g}, E_ref {k['moe_e_ref']:g}, φ {k['attn_phi']:g}, "
            f"cost scale {k['cost_scale']:g} ({k['cost_source']}); {k['layers']} layers"
            + (f"; served on {deps}" if deps else "")
        )
    if res.get("costs_from"):
        lines.append(f"costs: {res['costs_from']}")
    if res.get("calibration"):
        c = res["calibration"]
        lines.append(
            f"calibrated: cost scale {c['cost_scale']:g} makes {c['policy']} {c['target_ms']:g} ms at {c['rate']:g}/s"
        )
    if res.get("lengths_fit"):
        f = res["lengths_fit"]
        qs = "  ".join(f"{q} {f[q]:,.0f}" for q in f if q.startswith("q"))
        lines.append(
            f"lengths: log-logistic α {f['alpha']:,.0f} β {f['beta']:.3f} truncated to [{f['lo']}, {f['hi']}]: "
            f"mean {f['mean']:,.0f}, mode {f['mode']:,.0f}; quantiles {qs}"
        )
    return lines


#: the capacity bound's binding resource, abbreviated in the tables (the legend says which is which)

#: the capacity bound's binding resource, abbreviated in the tables (the legend says which is which)
BINDING_SHORT = {
    "attention groups": "A",
    "MoE pool": "P",
    "coupled steps": "S",
    "MoE on the attention dies": "M",
}
BOUND_LEGEND = (
    "its binding resource A attention groups, P MoE pool, S coupled steps, M MoE on the attention dies"
)


def bound_text(cap: dict[str, Any] | None) -> str:
    """``7.91 P``: a policy's capacity bound and its binding resource (– when it has none)."""
    if not cap or cap.get("bound_rps") is None:
        return "–"
    return f"{rps_text(cap['bound_rps'])} {BINDING_SHORT.get(cap['binding'], cap['binding'])}"


def range_rps_text(r: list[float] | None) -> str:
    return "–" if not r else f"{rps_text(r[0])}–{rps_text(r[1])}"


def sweep_slo_view(res: Any, *, width: int | None = None) -> TableView:
    """Per policy: our SLO-compliant throughput (median over seeds, their range, the capacity bound)
    and its ratio to the first policy, the paper's beside them, and the mean TTFT at 1 request/s
    (ours, the paper's). A narrow terminal drops the two TTFT columns
    (:func:`sweep_at_1rps_line` says them in words)."""
    pols = list(res["policies"])
    paper = res.get("paper") or {}
    p_rps, p_1 = paper.get("slo_rps") or {}, paper.get("mean_ttft_ms_at_1rps") or {}
    base = p_rps.get(pols[0]) if pols else None
    censored, ratios, at1 = (
        res.get("slo_censored") or {},
        res.get("ratios") or {},
        res.get("mean_ttft_ns_at_1rps") or {},
    )
    cap, ranges = res.get("capacity") or {}, res.get("slo_range") or {}
    seeds = len(res.get("seeds") or []) > 1
    full = not narrow(width)
    rows = [
        (
            p,
            rps_text(res["slo_rps"].get(p), bool(censored.get(p))),
            *((range_rps_text(ranges.get(p)),) if seeds else ()),
            bound_text(cap.get(p)),
            ratios.get(p),
            None if p_rps.get(p) is None else f"{p_rps[p]:g}",
            p_rps[p] / base if p_rps.get(p) is not None and base else None,
            *((at1.get(p), None if p_1.get(p) is None else round(p_1[p] * 1e6)) if full else ()),
        )
        for p in pols
    ]
    question = f" — {res['question']}" if res.get("question") else ""
    columns = {
        "policy": "policy",
        "slo_rps": "SLO RPS" + (" median" if seeds else ""),
        **({"slo_range": "seeds"} if seeds else {}),
        "bound": "bound",
        "ratio": "ratio",
        "paper_slo_rps": "paper RPS",
        "paper_ratio": "paper ratio",
        **({"ttft_at_1rps_ns": "mean TTFT @1/s", "paper_ttft_at_1rps_ns": "paper @1/s"} if full else {}),
    }
    dtypes = dict.fromkeys(columns, pl.String) | {
        "ratio": pl.Float64,
        "paper_ratio": pl.Float64,
        "ttft_at_1rps_ns": pl.Int64,
        "paper_ttft_at_1rps_ns": pl.Int64,
    }
    return _rows_view(
        f"SLO-compliant throughput (requests/s){question}",
        columns,
        rows,
        name="sweep-slo",
        caption="≥: the SLO was met at every rate swept (a lower bound); "
        + (
            f"seeds: min–max over {len(res['seeds'])} seeds; "
            if seeds
            else f"one seed ({(res.get('seeds') or ['–'])[0]}): no range (--seeds 5 gives one); "
        )
        + f"bound: the capacity bound, {BOUND_LEGEND}; ratio = policy / "
        + (pols[0] if pols else "the first policy"),
        dtypes={c: dtypes[c] for c in columns},
    )


def sweep_at_1rps_line(res: Any) -> str:
    """The mean TTFT at 1 request/s per policy (the paper's beside it), in words: what a narrow
    terminal shows instead of the SLO table's last two columns."""
    from asaptrace.units import human_ns

    at1 = res.get("mean_ttft_ns_at_1rps") or {}
    p_1 = (res.get("paper") or {}).get("mean_ttft_ms_at_1rps") or {}
    parts = []
    for p in res["policies"]:
        text = f"{p} {human_ns(at1.get(p), sig=True)}"
        if p_1.get(p) is not None:
            text += f" (paper {human_ns(round(p_1[p] * 1e6), sig=True)})"
        parts.append(text)
    return "mean TTFT at 1 request/s: " + ", ".join(parts)


def sweep_legend(res: Any) -> str:
    """What the SLO table's columns mean (the view's caption), one line for a terminal."""
    return sweep_slo_view(res).caption


def sweep_curves_view(res: Any) -> TableView:
    """Rate → mean (and p99, up to three policies) TTFT per policy; every quantile is in --json."""
    pols = list(res["policies"])
    rates = sorted({row["rate"] for p in pols for row in res["curves"][p]})
    by = {(p, row["rate"]): row for p in pols for row in res["curves"][p]}
    p99 = len(pols) <= 3
    columns = {"rate": "rate /s"}
    for i, p in enumerate(pols):
        columns[f"mean_{i}_ns"] = f"{p} mean"
        if p99:
            columns[f"p99_{i}_ns"] = f"{p} p99"
    rows = []
    for r in rates:
        row: list[Any] = [r]
        for p in pols:
            point = by.get((p, r)) or {}
            row.append(point.get("mean_ttft_ns"))
            if p99:
                row.append(point.get("p99_ttft_ns"))
        rows.append(tuple(row))
    dtypes = {c: (pl.Float64 if c == "rate" else pl.Int64) for c in columns}
    return _rows_view("TTFT by rate", columns, rows, name="sweep-curves", dtypes=dtypes)


def sweep_decomposition_view(res: Any) -> TableView:
    """TTFT = queue + own + sync by prompt length at the decomposition rate (shares of the mean)."""
    from asaptrace.replay.whatif.sweep_result import DECOMPOSITION_SCHEMA  # `ingest` loads no replay module

    rows = [tuple(b[c] for c in DECOMPOSITION_SCHEMA) for b in res.get("decomposition") or []]
    return _rows_view(
        f"TTFT decomposition at {res.get('decomposition_rate', 0):g}/s",
        {
            "policy": "policy",
            "bucket": "prompt tokens",
            "n_requests": "requests",
            "mean_ttft_ns": "mean TTFT",
            "queue_share": "queue",
            "own_share": "own",
            "sync_share": "sync",
        },
        rows,
        name="sweep-decomposition",
        caption="queue: arrival → first work; own: its share of the kernels it is in; sync: the rest",
        dtypes=DECOMPOSITION_SCHEMA,
    )


def sweep_vary_view(res: Any) -> TableView:
    """One knob at a time: each value's SLO throughput per policy and the headline ratio."""
    from asaptrace.replay.whatif.sweep_result import headline_policy  # `ingest` loads no replay module

    pols = list(res["policies"])
    columns = {"knob": "knob", "value": "value"}
    columns |= {f"rps_{i}": f"{p} RPS" for i, p in enumerate(pols)}
    columns["ratio"] = f"{headline_policy(pols)}/{pols[0]}" if pols else "ratio"
    rows = [
        (
            str(v["knob"]),
            str(v["value"]),
            *(rps_text((v.get("slo_rps") or {}).get(p)) for p in pols),
            v.get("ratio"),
        )
        for v in res.get("vary") or []
    ]
    dtypes = dict.fromkeys(columns, pl.String) | {"ratio": pl.Float64}
    return _rows_view("Sensitivity (one knob at a time)", columns, rows, name="sweep-vary", dtypes=dtypes)


def sweep_tornado_view(res: Any) -> TableView:
    """Each varied knob's range of the headline ratio, widest first."""
    rows = [
        (
            e["knob"],
            e["ratio_min"],
            str(e["at_min"]),
            e["ratio_max"],
            str(e["at_max"]),
            e["ratio_max"] - e["ratio_min"],
        )
        for e in res.get("tornado") or []
    ]
    return _rows_view(
        "Tornado (widest first)",
        {
            "knob": "knob",
            "min_ratio": "lowest ratio",
            "at_min": "at",
            "max_ratio": "highest ratio",
            "at_max": "at",
            "swing": "swing",
        },
        rows,
        name="sweep-tornado",
        caption="no rows: no ratio to compare (the SLO was met at every rate swept, or missed at the lowest)",
        dtypes={
            "knob": pl.String,
            "min_ratio": pl.Float64,
            "at_min": pl.String,
            "max_ratio": pl.Float64,
            "at_max": pl.String,
            "swing": pl.Float64,
        },
    )


def sweep_views(res: Any, *, width: int | None = None) -> list[TableView]:
    """Every table of a sweep, in the order each face shows them (vary and tornado when asked)."""
    views = [sweep_slo_view(res, width=width), sweep_curves_view(res), sweep_decomposition_view(res)]
    if res.get("vary"):
        views += [sweep_vary_view(res), sweep_tornado_view(res)]
    return views


# -------------------------------------------------------------------------------------------- advice
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
    """Whether a what-if's offline and online answers point different ways (it wins back time on
    these batches but serves fewer requests/s than the measured policy under load, or the reverse):
    the rule :func:`asaptrace.advise.advice.online_text` words in its line. None without both."""
    o = w.get("online") or {}
    ratio, rec = o.get("ratio"), w.get("recovered_ns")
    if ratio is None or rec is None:
        return None
    return (ratio > 1.0) != (rec > 0)


def _has_online(j: dict[str, Any]) -> bool:
    return any((w.get("online") or {}).get("slo_rps") is not None for w in j["whatifs"])


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
    return _rows_view(
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
    return lines


def online_setup_line(j: dict[str, Any]) -> str:
    """What the online columns were served on: the requests, the costs, the seeds and arrivals
    (every number of the online answer is in the table, each beside its bound and range)."""
    on = j.get("online") or {}
    if on.get("status") != "run":
        return f"online: not run ({on.get('reason', '–')})"
    return (
        f"online: {on['requests']}; {on['costs_from']}; {len(on.get('seeds') or [])} seeds, at least"
        f" {on.get('min_arrivals', 0):,} arrivals a rate, every one drained."
    )


def advice_lines(j: dict[str, Any]) -> list[str]:
    """Every advice line, ranked, then one per what-if that does not apply (each from its numbers)."""
    return [w["line"] for w in j["whatifs"]]
