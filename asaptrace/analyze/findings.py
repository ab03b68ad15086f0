"""Findings: the Diagnosis tables turned into ranked sentences a user can act on.

Each finding carries a ``code`` (stable, for scripts), a ``severity``, the time at stake
(``cost_ns``: per rank on average, used to rank findings; None for information) and the numbers
behind its text (``data``). The texts format durations for people; the tables keep integer ns.

Rules every text keeps (a test re-reads the findings of every sample against its tables):

* a number in a text is one of a table's, with the rounding the text shows, and says which wait
  it is: *exposed* (not hidden under compute: ``step_breakdown.wait_ns``,
  ``barrier_by_rank.exposed_wait_ns``) or *total* (the whole time spent waiting inside collective
  kernels: ``barrier_instances.wait_ns``, ``barrier_by_rank.wait_ns``, ``barrier_by_group.mean_wait_ns``);
* a stock sentence appears only when its numbers say it (balanced tokens with unbalanced Σs²,
  short requests waiting a larger share, a barrier at all); an unknown number drops its clause;
* the severity is a function of the cost at stake (:func:`cost_severity`, share of the mean step
  time per rank), so nothing with 0 ns at stake is ``high`` and, within a kind, more time at stake
  is never less severe (the rule, and each kind's cost, in docs/analyses/findings.md); findings
  are sorted by severity, then by the cost no other finding counts;
* when part of a finding's time is counted in another finding (the overlap finding's exposed
  barrier wait is the barrier finding's), its text says so and ``data`` names it
  (``counted_in``, ``counted_ns``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from asaptrace.analyze._findings_evidence import unreliable_residual, weigh
from asaptrace.analyze._findings_idle import idle_findings
from asaptrace.analyze._findings_overlap import overlap_findings
from asaptrace.units import percent, plural, text_ns

#: A clock residual above this means the matched collectives do not end together.
UNRELIABLE_RESIDUAL_NS = 50_000
#: Token counts within this ratio of the mean are balanced; Σs² from this ratio up is not.
BALANCED_RATIO = 1.10
UNBALANCED_RATIO = 1.25
#: Short requests "pay" when their wait share exceeds the longest bucket's by this much.
TTFT_SHARE_GAP = 0.05


@dataclass(frozen=True)
class Finding:
    """One thing the user should know, in plain words, with the numbers behind it."""

    code: str
    severity: str  # high | medium | low | info
    text: str
    cost_ns: int | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "cost_ns": self.cost_ns,
            "text": self.text,
            "data": self.data,
        }


#: Severity by the share of the mean step time per rank at stake.
SEVERITY_SHARES = (("high", 0.10), ("medium", 0.03))
_ORDER = {"high": 0, "medium": 1, "low": 2, "info": 3}


def cost_severity(cost_ns: int, step_time_ns: float) -> str:
    """``high`` from 10 % of the mean step time per rank at stake, ``medium`` from 3 %, ``low``
    above 0, ``info`` for nothing at stake."""
    if cost_ns <= 0:
        return "info"
    share = cost_ns / step_time_ns if step_time_ns > 0 else 0.0
    return next((label for label, floor in SEVERITY_SHARES if share >= floor), "low")


def rank_findings(t: dict[str, pl.DataFrame], ranks: pl.DataFrame, meta: dict[str, Any]) -> list[Finding]:
    """Findings from the Diagnosis tables, most costly first (then by severity)."""
    out: list[Finding] = []
    n_ranks = max(ranks.height, 1)
    deployment = (meta.get("parallel") or {}).get("deployment")
    out += _barrier_findings(t, n_ranks, deployment)
    out += _straggler_findings(t, n_ranks)
    out += _imbalance_findings(t, n_ranks, coupled=t["barrier_instances"].height > 0)
    out += overlap_findings(t, n_ranks, deployment, Finding)
    out += idle_findings(t, n_ranks, Finding)
    if t["barrier_instances"].height:
        out += _ttft_findings(t)
    out += _clock_findings(t, meta)
    step_time = int(t["step_breakdown"].get_column("step_time_ns").sum()) / n_ranks
    out = [f if f.cost_ns is None else replace(f, severity=cost_severity(f.cost_ns, step_time)) for f in out]
    out = weigh(out, unreliable_residual(t, meta, UNRELIABLE_RESIDUAL_NS))
    # within a severity, by the time at stake that no other finding counts (``data["counted_ns"]``)
    return sorted(out, key=lambda f: (_ORDER[f.severity], -((f.cost_ns or 0) - f.data.get("counted_ns", 0))))


def _barrier_findings(t: dict[str, pl.DataFrame], n_ranks: int, deployment: str | None) -> list[Finding]:
    b, bd = t["barrier_instances"], t["step_breakdown"]
    rec = t["receive_waits"]
    if b.height == 0 and rec.height:
        raw = int(rec.get_column("wait_ns").sum())
        exposed = int(bd.get_column("wait_ns").sum())
        total = int(bd.get_column("step_time_ns").sum())
        n_att = rec.get_column("rank").n_unique()
        share = exposed / total if total else 0.0
        return [
            Finding(
                "receive_wait",
                "",
                f"No barrier (asynchronous deployment): attention devices wait only for their own results — "
                f"{text_ns(raw / n_att)} of total wait per attention device in combine receives, over "
                f"{plural(n_att, 'attention device')}, of which {text_ns(exposed / n_att)} is exposed "
                # the share is of every device's step time (the expert devices' too, as the headline's
                # wait share); under 1 % it keeps a decimal rather than read "0%" of a real wait
                f"(compute idle), {percent(share, 1 if share < 0.01 else 0)} of all devices' step time.",
                cost_ns=exposed // n_ranks,
                data={
                    "receive_wait_ns": raw,
                    "exposed_wait_ns": exposed,
                    "step_time_ns": total,
                    "wait_share": share,
                },
            )
        ]
    if b.height == 0:
        text = (
            "No matched collective instances: no barrier wait could be measured"
            + (
                " (asynchronous disaggregated deployment: dispatch/combine are not barriers)"
                if deployment == "disaggregated"
                else ""
            )
            + "."
        )
        return [Finding("no_barrier", "info", text)]
    wait = int(bd.get_column("wait_ns").sum())
    total = int(bd.get_column("step_time_ns").sum())
    inside = int(b.get_column("wait_ns").sum())
    share = wait / total if total else 0.0
    n_inst = b.get_column("instance").n_unique()
    out = [
        Finding(
            "barrier_wait",
            "",
            f"Exposed barrier wait (not hidden under compute) cost {percent(share)} of step time: "
            f"{text_ns(wait / n_ranks)} per rank on average over {plural(n_ranks, 'rank')}, of "
            f"{text_ns(inside / n_ranks)} of total wait inside collective kernels, over "
            f"{plural(n_inst, 'matched collective instance')}.",
            cost_ns=wait // n_ranks,
            data={
                "exposed_wait_ns": wait,
                "total_wait_ns": inside,
                "step_time_ns": total,
                "wait_share": share,
                "n_instances": n_inst,
            },
        )
    ]
    worst = b.sort("wait_ns", descending=True).row(0, named=True)
    first = b.filter(pl.col("instance") == b.get_column("instance").min())
    fw = first.sort("wait_ns", descending=True).row(0, named=True)
    # the first instance shows whether the wait is there from the start; when the longest wait is
    # that instance's, saying it twice would read as two different waits
    at_first = (
        " It was the first instance."
        if (fw["instance"], fw["rank"]) == (worst["instance"], worst["rank"])
        else f" At the first instance ({_where(fw)}) rank {fw['rank']} waited longest "
        f"({text_ns(fw['wait_ns'])}) and rank {fw['last_rank']} arrived last."
    )
    out.append(
        Finding(
            "longest_wait",
            "info",
            f"Longest single wait (total): rank {worst['rank']} waited {text_ns(worst['wait_ns'])} at {_where(worst)} for "
            f"rank {worst['last_rank']}.{at_first}",
            data={
                "rank": worst["rank"],
                "wait_ns": worst["wait_ns"],
                "instance": worst["instance"],
                "last_rank": worst["last_rank"],
                "first_instance_longest_wait_rank": fw["rank"],
                "first_instance_last_rank": fw["last_rank"],
            },
        )
    )
    return out


def _where(row: dict[str, Any]) -> str:
    """Where a wait was: its op as the barrier tables show it (a collective kernel without its
    argument list), then its step, layer and micro-batch."""
    op = row["op"] if row["kind"] != "collective" else row["op"].split("(")[0]
    parts = [op]
    for key in ("step", "layer", "micro_batch"):
        if row.get(key) is not None:
            parts.append(f"{key.replace('_', '-')} {row[key]}")
    return ", ".join(parts)


def _straggler_findings(t: dict[str, pl.DataFrame], n_ranks: int) -> list[Finding]:
    out: list[Finding] = []
    groups, by_group, imb = t["straggler_groups"], t["barrier_by_group"], t["imbalance_by_group"]
    if groups.height:
        g = groups.row(0, named=True)
        row = by_group.filter(pl.col("dp_group") == g["dp_group"])
        caused_ns = int(row.get_column("caused_wait_ns").sum()) if row.height else 0
        imposed_ns = int(row.get_column("imposed_wait_ns").sum()) if row.height else 0
        own = int(row.get_column("n_ranks").sum()) if row.height else 0
        n_other = max(int(by_group.get_column("n_ranks").sum()) - own, 0)
        text = f"DP group {g['dp_group']} arrived last at {percent(g['last_share'])} of barriers"
        data: dict[str, Any] = {
            **g,
            "caused_wait_ns": caused_ns,
            "imposed_wait_ns": imposed_ns,
            "n_other_ranks": n_other,
        }
        rel = _relative_load(imb, g["dp_group"])
        if rel is not None:
            sq, tok = rel
            data.update(sum_sq_vs_mean=sq, tokens_vs_mean=tok)
            text += f"; its Σs² was {sq:.2f}× the mean while its token count was {tok:.2f}× the mean"
        if g["cause"] == "load":
            text += " — load-induced: it is last when its batch is the heaviest"
        elif g["cause"] == "persistent":
            text += " — persistent: it is last whatever its batch"
        culprit = _dominant_rank(t, g["dp_group"])
        if culprit is not None:
            data["dominant_rank"] = culprit
            text += f" (mostly because of rank {culprit})"
        text += f"; it alone held the barrier for {text_ns(imposed_ns)} in all (imposed wait)"
        if n_other:
            text += (
                f", and at the barriers it reached last the other {plural(n_other, 'rank')} waited "
                f"{text_ns(caused_ns / n_other)} each (total wait)"
            )
        # at stake: the wait the others would not have had, had the group been as fast as the next one
        out.append(
            Finding("straggler_group", "", text + ".", cost_ns=imposed_ns * n_other // n_ranks, data=data)
        )
    st = t["stragglers"]
    for r in st.filter(pl.col("outlier")).iter_rows(named=True):
        caused_ns, imposed_ns, at_stake = _rank_blame(t["barrier_instances"], r["rank"])
        test = {"dixon_q95": "Dixon's Q test, 95%", "3sigma": "3σ test"}.get(
            r["outlier_test"], r["outlier_test"]
        )
        if r["cause"] == "slow_device":
            versus = {
                "dp_group_peers": "those of its DP-group peers (same batch)",
                "load_fit": "its batches' Σs/Σs² predict",
                "all_ranks": "the median rank's",
            }
            text = (
                f"Rank {r['rank']} is a slow device: its non-MoE kernels take {r['compute_ratio']:.2f}× as long as "
                f"{versus.get(r['compute_baseline'], 'expected')} ({test})"
            )
        else:
            text = (
                f"Rank {r['rank']} holds a hot expert: its MoE kernels take {r['moe_ratio']:.2f}× the median "
                f"({test})"
            )
        # a share nobody measured is left out, never printed as "at unknown of barriers"
        if r["last_share"] is not None:
            text += f"; it arrived last at {percent(r['last_share'])} of barriers"
        if imposed_ns:
            text += (
                " and alone held them" if r["last_share"] is not None else "; it alone held barriers"
            ) + (f" for {text_ns(imposed_ns)} in all (imposed wait)")
        out.append(
            Finding(
                r["cause"],
                "",
                text + ".",
                cost_ns=at_stake // n_ranks,
                data={**r, "caused_wait_ns": caused_ns, "imposed_wait_ns": imposed_ns},
            )
        )
    if not groups.height and st.height and st.get_column("last_count").sum() > 0:
        r = st.sort("last_count", descending=True).row(0, named=True)
        out.append(
            Finding(
                "straggler_rank",
                "medium",
                f"Rank {r['rank']} arrived last at {percent(r['last_share'])} of barriers "
                f"({r['last_count']} of them).",
                data={"rank": r["rank"], "last_count": r["last_count"], "last_share": r["last_share"]},
            )
        )
    return out


def _rank_blame(b: pl.DataFrame, rank: int) -> tuple[int, int, int]:
    """(caused, imposed, at stake) of a rank over the instances it reached last.

    caused = Σ the other ranks' waits there (total wait); imposed = Σ release − the latest other
    arrival (the time the rank alone held the barrier); at stake = Σ imposed × other ranks there
    (the wait that would vanish had the rank arrived with the next-latest one).
    """
    if b.height == 0:
        return 0, 0, 0
    mine = b.filter(
        pl.col("instance").is_in(b.filter(pl.col("last_rank") == rank).get_column("instance").implode())
    )
    others = mine.filter(pl.col("rank") != rank)
    if others.height == 0:
        return 0, 0, 0
    per = others.group_by("instance").agg(
        (pl.col("release_ns").first() - pl.col("arrival_ns").max()).alias("imposed"),
        pl.len().alias("n"),
        pl.col("wait_ns").sum().alias("caused"),
    )
    imposed = int(per.get_column("imposed").sum())
    at_stake = int((per.get_column("imposed") * per.get_column("n")).sum())
    return int(per.get_column("caused").sum()), imposed, at_stake


def _dominant_rank(t: dict[str, pl.DataFrame], group: int) -> int | None:
    """An outlier rank of the group that accounts for most of the group's last arrivals."""
    st = t["stragglers"].filter(pl.col("dp_group") == group)
    total = st.get_column("last_count").sum()
    out = st.filter(pl.col("outlier") & (2 * pl.col("last_count") > total))
    return int(out.get_column("rank")[0]) if total and out.height else None


def _relative_load(imb: pl.DataFrame, group: int) -> tuple[float, float] | None:
    if imb.height == 0 or imb.get_column("sum_sq").is_null().all():
        return None
    rel = imb.with_columns(
        _sq=pl.col("sum_sq") / pl.col("sum_sq").mean().over("step"),
        _tok=pl.col("tokens") / pl.col("tokens").mean().over("step"),
    ).filter(pl.col("dp_group") == group)
    if rel.height == 0:
        return None
    return float(rel.get_column("_sq").mean()), float(rel.get_column("_tok").mean())  # type: ignore[arg-type]


def _imbalance_findings(t: dict[str, pl.DataFrame], n_ranks: int, *, coupled: bool) -> list[Finding]:
    steps, fit = t["imbalance_by_step"], t["imbalance_fit"]
    if steps.height == 0:
        return []
    f = fit.row(0, named=True)
    if f["cost_basis"] == "measured_attention":
        worst = steps.get_column("attention_ratio").max()
        if worst is None:
            return [
                Finding(
                    "lengths_unknown",
                    "info",
                    "Request lengths are unknown and no attention kernel was found: DP imbalance "
                    "cannot be measured.",
                )
            ]
        return [
            Finding(
                "lengths_unknown",
                "info",
                "Request lengths are unknown (no seq_lens annotations, no --batches sidecar): imbalance is "
                f"measured with attention time only; the slowest DP group's attention was up to "
                f"{worst:.2f}× the mean.",
                data={"max_attention_ratio": worst},
            )
        ]
    sq = steps.get_column("sum_sq_ratio").drop_nulls()
    tok = steps.get_column("tokens_ratio").drop_nulls()
    att = steps.get_column("attention_ratio").drop_nulls()
    if sq.len() == 0:
        return []
    sq_mean, sq_max = float(sq.mean()), float(sq.max())  # type: ignore[arg-type]
    tok_mean = float(tok.mean()) if tok.len() else None  # type: ignore[arg-type]
    att_mean = float(att.mean()) if att.len() else None  # type: ignore[arg-type]
    text = (
        f"Σs² imbalance: the heaviest DP group's Σs² was {sq_mean:.2f}× the mean on average (up to "
        f"{sq_max:.2f}×)"
    )
    if tok_mean is not None:
        text += f" while tokens were {tok_mean:.2f}×"
    if att_mean is not None:
        text += f"; measured attention {att_mean:.2f}×"
    text += "."
    data = {
        "mean_sum_sq_ratio": sq_mean,
        "max_sum_sq_ratio": sq_max,
        "mean_tokens_ratio": tok_mean,
        "mean_attention_ratio": att_mean,
        **f,
    }
    if not coupled:
        text += (
            " No barrier couples the DP groups here, so the imbalance costs no waiting; attention time fits "
            f"c0 + c1·Σs + c2·Σs² with R² = {f['r2']:.2f}."
            if f["r2"] is not None
            else " No barrier couples the DP groups here, so the imbalance costs no waiting."
        )
        return [Finding("sumsq_imbalance", "info", text, data=data)]
    if tok_mean is not None and tok_mean <= BALANCED_RATIO and sq_mean >= UNBALANCED_RATIO:
        text += " Balanced token counts do not balance the barrier."
    if f["r2"] is not None:
        text += f" Attention time fits c0 + c1·Σs + c2·Σs² with R² = {f['r2']:.2f}"
        if f["explained_wait_share"] is not None:
            text += (
                f"; the DP groups' length mix accounts for at least {percent(f['explained_wait_share'])} of the "
                "exposed barrier wait"
            )
            if f["wait_r2"] is not None:
                text += f" and ranks the groups' waits with R² = {f['wait_r2']:.2f}"
        text += "."
    wait = t["barrier_by_step"].get_column("exposed_wait_ns").sum()
    explained = f["explained_wait_share"] or 0.0
    return [
        Finding(
            "sumsq_imbalance",
            "",
            text,
            cost_ns=int(wait * explained) // n_ranks,
            data=data,
        )
    ]


def _ttft_findings(t: dict[str, pl.DataFrame]) -> list[Finding]:
    tb = t["ttft_by_bucket"]
    if tb.height < 2 or tb.get_column("wait_share").is_null().all():
        return []
    known = tb.filter(pl.col("wait_share").is_not_null())
    if known.height < 2:
        return []
    first, last = known.row(0, named=True), known.row(known.height - 1, named=True)
    shares = (
        f"{first['bucket']} requests spend {percent(first['wait_share'])} of their step waiting, "
        f"{last['bucket']} requests {percent(last['wait_share'])}"
    )
    if first["wait_share"] - last["wait_share"] >= TTFT_SHARE_GAP:
        text = f"Short requests pay for the barrier: {shares}."
    elif last["wait_share"] - first["wait_share"] >= TTFT_SHARE_GAP:
        text = f"Long requests wait a larger share of their step than short ones: {shares}."
    else:
        text = f"Requests of every length wait about the same share of their step at the barrier: {shares}."
    if first["mean_ttft_ns"] is not None and last["mean_ttft_ns"] is not None:
        text = text[:-1] + (
            f"; their mean time to first token is {text_ns(first['mean_ttft_ns'])} and "
            f"{text_ns(last['mean_ttft_ns'])}."
        )
    return [Finding("ttft_wait", "info", text, data={"buckets": tb.to_dicts()})]


def _clock_findings(t: dict[str, pl.DataFrame], meta: dict[str, Any]) -> list[Finding]:
    clock = meta.get("clock") or {}
    c = t["clock"]
    if c.height < 2 or clock.get("status") == "replayed":  # a replay has one simulated clock: none aligned
        return []
    if clock.get("status") == "impossible":
        return [
            Finding(
                "clock",
                "info",
                "Clocks could not be aligned (too few collective instances shared "
                "across ranks to align on); cross-rank times are used as recorded.",
                data=clock,
            )
        ]
    if (
        c.height == 0
        or c.get_column("residual_ns").is_null().all()
        or c.get_column("offset_ns").is_null().all()
    ):
        return []
    span = int(c.get_column("offset_ns").max() - c.get_column("offset_ns").min())  # type: ignore[operator]
    resid = int(c.get_column("residual_ns").max())  # type: ignore[arg-type]
    on = f" on {plural(clock['n_instances'], 'collective instance')}" if clock.get("n_instances") else ""
    ref = f" (reference rank {clock['reference_rank']})" if clock.get("reference_rank") is not None else ""
    text = f"Clocks aligned{on}: offsets span {text_ns(span)}{ref}, residual at most {text_ns(resid)}."
    severity = "info"
    if resid > UNRELIABLE_RESIDUAL_NS:
        severity = "medium"
        text += (
            " The alignment is unreliable: after it, collective end times still disagree by up to "
            f"{text_ns(resid)} (the matched kernels may not synchronise, e.g. point-to-point sends, or the "
            "trace holds only part of a larger group), so cross-rank waits are approximate."
        )
    elif span <= 2 * max(resid, 1_000):
        text += " The ranks' clocks already agreed; differences in trace start times are not clock skew."
    if clock.get("status") == "partial":
        text += " " + " ".join(clock.get("notes", []))
    return [
        Finding("clock", severity, text, data={"offset_span_ns": span, "max_residual_ns": resid, **clock})
    ]
