"""The regression gate: thresholds on :func:`asaptrace.analyze.compare.compare`'s headline numbers,
judged against the steps' spread, as one verdict per metric and scope (the run, each DP group).

A threshold is ``METRIC>+X%`` (a rise of more than X % of BASE fails) or ``METRIC<-X%`` (a fall of
more than X % fails: overlap efficiency, utilisation), on the names of :data:`GATE_METRICS`.

**Noise.** A change fails only when it exceeds its threshold *and* the steps' spread: its
*noise band*, twice the standard error of the change estimated from the per-step values
(:func:`step_values`). When both runs hold the same steps (≥ 2, same step numbers: one workload's
same batches), the steps pair up and the band is ``2 · sd(d) / √n`` for a mean over steps and
``2 · sd(d) · √n`` for a total over steps, ``d`` the per-step changes (NEW − BASE); otherwise it is
Welch's ``2 · √(sd_a²/n_a + sd_b²/n_b)`` (× n for a total), each run needing ≥ 2 steps. A
metric without per-step values (overlap, utilisation) or a run of one step has no band: the
threshold alone decides, and the verdict says so. Pure: tables in, verdicts out.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from asaptrace.errors import UsageError

#: gate name → (headline metric, per-step aggregation: "mean" | "sum" | None (no per-step values),
#: per DP group too)
GATE_METRICS: dict[str, tuple[str, str | None, bool]] = {
    "step_time": ("mean_step_time_ns", "mean", True),
    "exposed_wait": ("exposed_wait_ns", "sum", True),
    "wait_share": ("wait_share", "mean", False),
    "exposed_transfer": ("transfer_ns", "sum", False),
    "tokens_ratio": ("tokens_ratio", "mean", False),
    "sum_sq_ratio": ("sum_sq_ratio", "mean", False),
    "attention_ratio": ("attention_ratio", "mean", False),
    "overlap_efficiency": ("overlap_efficiency", None, True),
    "utilisation": ("utilisation", None, False),
}

_EXPR = re.compile(r"^\s*([a-z_]+)\s*([<>])\s*([+-]?\d+(?:\.\d+)?)\s*%\s*$")

Tables = Mapping[str, pl.DataFrame]


@dataclass(frozen=True)
class Threshold:
    """``metric`` fails when its relative change (NEW − BASE) / BASE is beyond ``limit`` (a
    fraction, signed): above it for ``>``, below it for ``<``."""

    metric: str
    op: str  # ">" | "<"
    limit: float

    @property
    def text(self) -> str:
        return f"{self.metric}{self.op}{self.limit * 100:+g}%"

    def beyond(self, change: float) -> bool:
        return change > self.limit if self.op == ">" else change < self.limit


def parse_threshold(text: str) -> Threshold:
    """``"step_time>+5%"`` → Threshold; a bad expression or unknown metric is one UsageError."""
    m = _EXPR.match(text)
    if not m:
        raise UsageError(f"--fail-if {text!r}: expected METRIC>+X% or METRIC<-X%, e.g. step_time>+5%")
    name, op, value = m.group(1), m.group(2), float(m.group(3)) / 100
    if name not in GATE_METRICS:
        raise UsageError(f"--fail-if {text!r}: unknown metric {name!r}; one of {', '.join(GATE_METRICS)}")
    return Threshold(name, op, value)


def thresholds_from_toml(text: str, *, source: str) -> list[Threshold]:
    """A thresholds file: ``fail-if = ["step_time>+5%", "exposed_wait>+10%"]`` (``source`` names it
    in errors)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"not TOML ({err})", path=source) from None
    rules = data.get("fail-if")
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules) or not rules:
        raise UsageError('expected fail-if = ["step_time>+5%", …] (a list of thresholds)', path=source)
    unknown = sorted(set(data) - {"fail-if"})
    if unknown:
        raise UsageError(f"unknown keys {unknown}; only fail-if is read", path=source)
    return [parse_threshold(r) for r in rules]


# ---------------------------------------------------------------------------------- per-step values
def step_values(tables: Tables) -> pl.DataFrame:
    """Per step, the values whose mean (or sum) over steps is a headline metric:
    ``scope`` ("run" or "DP group N"), ``metric`` (a gate name), ``step``, ``value``."""
    bd, imb = tables["step_breakdown"], tables["imbalance_by_step"]
    frames = []
    if bd.height:
        bd = bd.filter(pl.col("step").is_not_null())
        scopes = [("run", bd)] + [
            (f"DP group {g}", bd.filter(pl.col("dp_group") == g))
            for g in sorted(bd.get_column("dp_group").drop_nulls().unique().to_list())
        ]
        for scope, t in scopes:
            per = t.group_by("step").agg(
                step_time=pl.col("step_time_ns").mean(),
                exposed_wait=pl.col("wait_ns").sum() / pl.col("rank").n_unique(),
                wait_share=pl.col("wait_ns").sum() / pl.col("step_time_ns").sum(),
                exposed_transfer=pl.col("transfer_ns").sum() / pl.col("rank").n_unique(),
            )
            keep = [m for m in per.columns if m != "step" and (scope == "run" or GATE_METRICS[m][2])]
            frames.append(_long(per.select("step", *keep), scope))
    if imb.height:
        per = imb.select("step", "tokens_ratio", "sum_sq_ratio", "attention_ratio")
        frames.append(_long(per, "run"))
    schema = {"scope": pl.String, "metric": pl.String, "step": pl.Int64, "value": pl.Float64}
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat([f.cast(schema) for f in frames]).drop_nulls("value")  # type: ignore[arg-type]


def _long(per: pl.DataFrame, scope: str) -> pl.DataFrame:
    return per.unpivot(index="step", variable_name="metric", value_name="value").with_columns(
        pl.lit(scope).alias("scope")
    )


def noise_band(a: list[tuple[int, float]], b: list[tuple[int, float]], how: str) -> float | None:
    """The noise band of a metric's change from per-step ``(step, value)`` lists (module docstring);
    None when there are too few steps to say."""
    da, db = dict(a), dict(b)
    if len(da) >= 2 and set(da) == set(db):
        d = [db[s] - da[s] for s in da]
        n = len(d)
        se = _sd(d) / math.sqrt(n)
    elif len(da) >= 2 and len(db) >= 2:
        n = (len(da) + len(db)) / 2
        se = math.sqrt(_sd(list(da.values())) ** 2 / len(da) + _sd(list(db.values())) ** 2 / len(db))
    else:
        return None
    return 2 * se * (n if how == "sum" else 1)


def _sd(x: list[float]) -> float:
    mean = sum(x) / len(x)
    return math.sqrt(sum((v - mean) ** 2 for v in x) / (len(x) - 1))


# ---------------------------------------------------------------------------------------- verdicts
#: one verdict's columns (docs/reference/columns.md ``gate``)
VERDICT_SCHEMA = {
    "threshold": pl.String,  # as given: step_time>+5%
    "metric": pl.String,  # the gate name
    "scope": pl.String,  # run | DP group N
    "base": pl.Float64,  # the headline value in BASE (its unit: the metric's, *_ns in ns)
    "new": pl.Float64,
    "change": pl.Float64,  # (new − base) / base, a fraction; null when unknown or from 0 to another value
    "noise": pl.Float64,  # the noise band as a fraction of base; null: no per-step values
    "status": pl.String,  # fail | pass | noise (beyond the threshold, within the band) | unknown
    # (from 0, a rise for ">" or a fall for "<" is beyond any threshold)
}


def verdicts(
    comparison: Mapping[str, pl.DataFrame], a: Tables, b: Tables, thresholds: list[Threshold]
) -> pl.DataFrame:
    """One row per threshold and scope (the run, then each DP group both runs hold, for the
    metrics that have one): see :data:`VERDICT_SCHEMA`. ``comparison`` is
    :func:`~asaptrace.analyze.compare.compare`'s result for ``a`` (BASE) and ``b`` (NEW)."""
    overall = {r["metric"]: (r["a"], r["b"]) for r in comparison["compare_overall"].iter_rows(named=True)}
    groups = comparison["compare_by_group"]
    sa, sb = _series(step_values(a)), _series(step_values(b))
    rows = []
    for t in thresholds:
        headline, how, per_group = GATE_METRICS[t.metric]
        cases = [("run", *overall.get(headline, (None, None)))]
        if per_group:
            for r in groups.filter(pl.col("dp_group").is_not_null()).iter_rows(named=True):
                if r[f"{headline}_a"] is not None and r[f"{headline}_b"] is not None:
                    cases.append((f"DP group {r['dp_group']}", r[f"{headline}_a"], r[f"{headline}_b"]))
        for scope, base, new in cases:
            rows.append(
                _verdict(t, scope, base, new, how, sa.get((scope, t.metric)), sb.get((scope, t.metric)))
            )
    return pl.DataFrame(rows, schema=VERDICT_SCHEMA, orient="row")


def _series(values: pl.DataFrame) -> dict[tuple[str, str], list[tuple[int, float]]]:
    out: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in values.iter_rows(named=True):
        out.setdefault((r["scope"], r["metric"]), []).append((r["step"], r["value"]))
    return out


def _verdict(
    t: Threshold,
    scope: str,
    base: float | None,
    new: float | None,
    how: str | None,
    sa: list[tuple[int, float]] | None,
    sb: list[tuple[int, float]] | None,
) -> tuple:
    if base is None or new is None:
        return (t.text, t.metric, scope, base, new, None, None, "unknown")
    band = noise_band(sa or [], sb or [], how) if how else None
    if base == 0:  # no relative change from zero: any rise (fall) in the threshold's direction is beyond it
        beyond = new > 0 if t.op == ">" else new < 0
        within = band is not None and abs(new) <= band
        status = "pass" if not beyond else "noise" if within else "fail"
        return (t.text, t.metric, scope, base, new, None if new else 0.0, None, status)
    change = (new - base) / base
    noise = None if band is None else band / abs(base)
    if not t.beyond(change):
        status = "pass"
    elif noise is not None and abs(change) <= noise:
        status = "noise"
    else:
        status = "fail"
    return (t.text, t.metric, scope, base, new, change, noise, status)


def failed(table: pl.DataFrame) -> bool:
    """Whether any verdict failed (the gate's exit code 1)."""
    return bool(table.height) and bool((table.get_column("status") == "fail").any())
