"""The advice, typed: one :class:`WhatIf` per candidate change, ranked, in an :class:`Advice`.

Every number a line says is a field beside it (``recovered_ns``, ``recovered_low_ns`` …), and the
line is made from those fields only (:func:`whatif_line`), so a test can re-read each line
against its numbers, as the findings' test does. No advice without a number: a what-if that does
not apply says why in one line instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from asaptrace.display import HtmlRepr
from asaptrace.errors import UsageError
from asaptrace.units import rps_text, text_ns

#: 1: the first advice JSON (docs/analyses/advise.md)
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class WhatIf:
    """One candidate change: what it is, whether it applies, what it wins back and how sure."""

    name: str  # balanced | chunked | asap | afd-pingpong | asap-expert-failure
    label: str  # "Σs²-balanced placement", "asap at 5×4 + 12", …
    policy: str
    applies: bool
    reason: str = ""  # why it does not apply (one line)
    params: dict[str, Any] = field(default_factory=dict)
    deployment: dict[str, Any] | None = None
    makespan_ns: int | None = None
    reference_ns: int | None = None
    recovered_ns: int | None = None
    recovered_low_ns: int | None = None
    recovered_high_ns: int | None = None
    range_from: list[str] = field(default_factory=list)  # what the range spans ("k_s 1–2", …)
    #: the replay's Monte-Carlo band (``mc_low_ns`` … makespans of noisy re-runs, ``mc_recovered_*``
    #: as time won back); None when the what-if draws none (a lockstep policy, a noiseless fit)
    band: dict[str, Any] | None = None
    fit: list[dict[str, Any]] = field(default_factory=list)  # the cost-fit parts it rests on
    answers: list[dict[str, Any]] = field(default_factory=list)  # the findings it answers
    chosen_from: str = ""  # "best of 7 splits of 32 devices"
    binding: str | None = None  # pool | attention | transfer (disaggregated what-ifs)
    bandwidth_bound: bool | None = None
    online: dict[str, Any] | None = None  # with --online: its SLO throughput beside the measured policy's
    line: str = ""

    @property
    def loses(self) -> bool:
        return self.applies and (self.recovered_ns or 0) < 0


@dataclass(frozen=True, repr=False)
class Advice(HtmlRepr):
    """A store's advice: the measured run, its ranked what-ifs, those that do not apply."""

    store: str
    deployment: str  # coupled | disaggregated (what the what-ifs replay it as)
    devices: int
    measured_makespan_ns: int
    reference_makespan_ns: int
    whatifs: list[WhatIf]  # applying ones, most recovered first; then those that do not apply
    findings: list[dict[str, Any]] = field(default_factory=list)  # the diagnosis' findings it read
    online: dict[str, Any] | None = None  # the sweep's scenario, SLO and the measured policy's RPS
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: the store's deployment as every command names it (``info.deployment_phrase``): "unknown
    #: deployment, 8 devices" where the what-ifs replay it as coupled
    deployment_phrase: str = ""
    #: how far the cost model every what-if rests on was from this very run (its measured
    #: deployment modelled back, :func:`~asaptrace.replay.whatif.model_error.self_consistency`)
    model_error: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def ranked(self) -> list[WhatIf]:
        return [w for w in self.whatifs if w.applies]

    def lines(self) -> list[str]:
        """Every advice line, ranked, then one line per what-if that does not apply."""
        return [w.line for w in self.whatifs]

    def to_json(self) -> dict[str, Any]:
        out = {"schema_version": self.schema_version}
        for f in fields(self):
            if f.name != "schema_version":
                out[f.name] = getattr(self, f.name)
        out["whatifs"] = [asdict(w) | {"loses": w.loses} for w in self.whatifs]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, path: str | None = None) -> Advice:
        if (
            not isinstance(data, Mapping)
            or data.get("schema_version") != SCHEMA_VERSION
            or "whatifs" not in data
        ):
            raise UsageError(f"is not an advice JSON of schema_version {SCHEMA_VERSION}", path=path)
        names = {f.name for f in fields(WhatIf)}
        whatifs = [WhatIf(**{k: v for k, v in w.items() if k in names}) for w in data["whatifs"]]
        known = {f.name for f in fields(cls)} - {"whatifs"}
        return cls(**{k: v for k, v in data.items() if k in known}, whatifs=whatifs)

    def __repr__(self) -> str:
        top = self.ranked[0].line if self.ranked else "no what-if applies"
        return f"<Advice {self.store}: {len(self.ranked)} what-ifs; top: {top}>"


# ---------------------------------------------------------------------------------------- wording
def range_text(w: WhatIf) -> str:
    """``1.1 s to 1.6 s`` over what the store cannot pin, or why there is no range."""
    lo, hi = w.recovered_low_ns, w.recovered_high_ns
    if lo is None or hi is None or not w.range_from:
        return "none: nothing it rests on could be varied"
    if _signed(lo) == _signed(hi):  # apart by less than the digits shown
        return f"no spread over {', '.join(w.range_from)}"
    return f"{_signed(lo)} to {_signed(hi)} over {', '.join(w.range_from)}"


def _signed(ns: int) -> str:
    return ("−" if ns < 0 else "") + text_ns(abs(ns))


def answers_text(w: WhatIf) -> str:
    if w.name == "asap-expert-failure":
        return "if one expert die fails"
    if not w.answers:
        return "no finding of this run"
    return "; ".join(a["label"] for a in w.answers)


def fit_text(w: WhatIf) -> str:
    parts = []
    for q in w.fit:
        if q["status"] == "fitted":
            r2 = "–" if q.get("r2") is None else f"{q['r2']:.2f}"
            parts.append(f"{q['part']} R² {r2}" + (" (weak)" if q.get("weak") else ""))
        else:
            parts.append(f"{q['part']} default")
    return "cost fit: " + (", ".join(parts) if parts else "measured times only")


def whatif_line(w: WhatIf) -> str:
    """The advice line of one what-if, from its own fields only."""
    if not w.applies:
        return f"{w.label}: does not apply — {w.reason}"
    assert w.recovered_ns is not None and w.reference_ns is not None
    verb = "loses" if w.recovered_ns < 0 else "wins back"
    text = (
        f"{answers_text(w)} → {w.label} {verb} {text_ns(abs(w.recovered_ns))} of "
        f"{text_ns(w.reference_ns)} (range {range_text(w)}; {fit_text(w)})"
    )
    if w.band:
        text += "; " + mc_band_text(w.band)
    if w.chosen_from:
        text += f"; {w.chosen_from}"
    if w.bandwidth_bound:
        text += "; bandwidth-bound: more expert dies stop helping (the transfers bind)"
    elif w.binding:
        text += f"; the {w.binding} binds"
    if w.online:
        text += "; " + online_text(w)
    return text


def mc_band_text(band: dict[str, Any]) -> str:
    """The Monte-Carlo band as time won back, and the contention it assumes when it assumes one."""
    lo, hi = band["mc_recovered_low_ns"], band["mc_recovered_high_ns"]
    text = f"{band['mc_runs']} noisy re-runs win back {_signed(lo)} to {_signed(hi)} (5th–95th percentile"
    prior = band.get("mc_contention_prior")
    if prior:
        text += f"; the low end assumes link contention κ up to {prior['kappa'][1]:g}, unseen in the run"
    return text + ")"


def online_clearly(online: dict[str, Any]) -> int | None:
    """Whether a what-if serves more (+1) or fewer (−1) requests/s under load than the measured
    policy, or no clear difference (0): over several seeds, their ranges must not overlap (the
    medians of 3.59 and 3.60 with ranges 3.1–3.7 are no difference); on one seed, the ratio. None
    when either was not served."""
    ratio = online.get("ratio")
    if ratio is None:
        return None
    mine, theirs = online.get("range"), online.get("measured_range")
    if mine and theirs and None not in (*mine, *theirs):
        if mine[0] > theirs[1]:
            return 1
        return -1 if mine[1] < theirs[0] else 0
    return (ratio > 1.0) - (ratio < 1.0)


def disagree(online: dict[str, Any], recovered_ns: int | None) -> bool | None:
    """Whether the offline and the online answers point different ways: time won back on these
    batches but clearly fewer requests/s served under load, or the reverse (no clear online
    difference is no disagreement). None without both. The one rule the line and the table say."""
    clearly = online_clearly(online)
    if clearly is None or recovered_ns is None:
        return None
    return clearly != 0 and (clearly > 0) != (recovered_ns > 0)


def online_text(w: WhatIf) -> str:
    """The online column of a what-if in words: its SLO throughput served under load (median over
    seeds, range, capacity bound and binding resource) against the measured policy's, and, when
    offline and online disagree, why."""
    o = w.online or {}
    base = rps_text(o.get("measured_slo_rps"), o.get("measured_censored"), prose=True)
    who = o.get("measured_policy", "coupled")
    if o.get("reason"):
        if o.get("measured_slo_rps") is None:
            return f"online: not served ({o['reason']})"
        return f"online: not served ({o['reason']}; {who} serves {base} requests/s)"
    mine = rps_text(o.get("slo_rps"), o.get("censored"), prose=True)
    text = f"online ({o.get('question', 'served under load, your lengths')}): {mine} requests/s"
    if o.get("range"):
        lo, hi = o["range"]
        text += f" (seeds {rps_text(lo, prose=True)}–{rps_text(hi, prose=True)}"
        if o.get("bound_rps") is not None:
            text += f"; bound {rps_text(o['bound_rps'], prose=True)}, the {o['binding']}"
        band = o.get("cost_band")
        if band:
            lo, hi = band["slo_rps_high_costs"], band["slo_rps_low_costs"]  # dearer costs: fewer requests
            text += f"; cost-fit band {rps_text(lo, prose=True)}–{rps_text(hi, prose=True)} on seed {band['seed']}"
        mc = o.get("mc_band")
        if mc and None not in (mc["slo_rps_slow"], mc["slo_rps_fast"]):
            lo, hi = mc["slo_rps_slow"], mc["slo_rps_fast"]
            text += f"; Monte-Carlo band {rps_text(lo, prose=True)}–{rps_text(hi, prose=True)} on seed {mc['seed']}"
        text += ")"
    text += f" against {who}'s {base}"
    if disagree(o, w.recovered_ns):
        if (w.recovered_ns or 0) < 0:
            text += (
                "; offline and online disagree: offline replays these batches as they arrived, with no"
                " queue to absorb a slower step; under steady load queueing and the binding resource decide"
            )
        else:
            text += (
                "; offline and online disagree: it wins back time on these batches, but under steady"
                " load its binding resource saturates sooner"
            )
    return text


# ---------------------------------------------------------------------------------- recommendation
@dataclass(frozen=True)
class Recommendation:
    """The change an advice recommends (``name`` None: none), by which rule, and why in words."""

    name: str | None
    rule: str  # online | offline | none
    why: str


def recommend(j: Mapping[str, Any]) -> Recommendation:
    """The one change to make, from an advice's JSON, by a rule the figure says: when the online
    answer ran and some what-if serves clearly more requests/s than the measured policy (its seeds'
    range above the measured policy's: :func:`online_clearly`), the one serving most; else the one
    winning back most time offline, leaving out any that serves clearly fewer requests/s under
    load (offline and online disagree there); none when no what-if wins back time."""
    applying = [w for w in j["whatifs"] if w["applies"]]
    on = j.get("online") or {}
    ran = on.get("status") == "run"
    who = on.get("measured_policy", "coupled")
    clearly = {w["name"]: online_clearly(w.get("online") or {}) if ran else None for w in applying}
    better = [w for w in applying if clearly[w["name"]] == 1]
    if better:
        w = max(better, key=lambda w: w["online"]["slo_rps"])
        o = w["online"]
        return Recommendation(
            w["name"],
            "online",
            f"chosen by SLO throughput under load: {rps_text(o['slo_rps'], o.get('censored'), prose=True)}"
            f" requests/s against {who}'s {rps_text(o.get('measured_slo_rps'), prose=True)},"
            " the seeds' ranges apart",
        )
    if not ran:
        context = "the online answer did not run"
    elif any(c == -1 for c in clearly.values()):
        context = f"none serves clearly more requests/s than {who}; those clearly fewer left out"
    else:
        context = f"none serves clearly more requests/s than {who} (the seeds' ranges overlap)"
    gaining = [w for w in applying if (w.get("recovered_ns") or 0) > 0 and clearly[w["name"]] != -1]
    if not gaining:
        return Recommendation(None, "none", f"no change recommended: none wins back time offline; {context}")
    w = max(gaining, key=lambda w: w["recovered_ns"])
    return Recommendation(
        w["name"],
        "offline",
        f"chosen by time won back offline: {text_ns(w['recovered_ns'])} of {text_ns(w['reference_ns'])}"
        f" ({context})",
    )
