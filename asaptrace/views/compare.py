"""Two stores side by side as a human sees them (overall, per DP group) and as flat tables."""

from __future__ import annotations

import polars as pl

from asaptrace.units import metric_label, metric_value, percent
from asaptrace.views.table import TableView, rows_view


def compare_views(comparison: dict[str, pl.DataFrame], a: str = "A", b: str = "B") -> list[TableView]:
    """Two stores side by side: each headline metric in its own unit, then per DP group."""
    rows = [
        (
            metric_label(r["metric"]),
            metric_value(r["unit"], r["metric"], r["a"]),
            metric_value(r["unit"], r["metric"], r["b"]),
            metric_value(r["unit"], r["metric"], r["delta"], delta=True),
            r["ratio"],
        )
        for r in comparison["compare_overall"].iter_rows(named=True)
    ]
    overall = rows_view(
        f"{a} vs {b}",
        {"metric": "metric", "a": a, "b": b, "delta": "delta", "ratio": "ratio"},
        rows,
        name="compare-overall",
        caption=f"delta = {b} − {a} (shares in percentage points, pp); ratio = {b} / {a}",
        dtypes={"metric": pl.String, "a": pl.String, "b": pl.String, "delta": pl.String, "ratio": pl.Float64},
    )
    groups = comparison["compare_by_group"]
    by_group = TableView(
        f"{a} vs {b}, per DP group",
        groups.columns,
        groups,
        name="compare-by-group",
        caption=f"step: mean step time; wait: exposed wait per rank; overlap: overlap efficiency; Δ = {b} − {a}",
        labels=[_group_label(c, a, b) for c in groups.columns],
    )
    return [overall, by_group]


def _group_label(column: str, a: str, b: str) -> str:
    """``exposed_wait_ns_b`` → ``wait B``: short enough for an 80-column terminal (legend in the caption)."""
    short = {"mean_step_time_ns": "step", "exposed_wait_ns": "wait", "overlap_efficiency": "overlap"}
    for suffix, form in (("_a", "{} " + a), ("_b", "{} " + b), ("_delta", "Δ {}")):
        if column.endswith(suffix) and (name := column.removesuffix(suffix)) in short:
            return form.format(short[name])
    return "DP group" if column == "dp_group" else column.replace("_", " ")


def compare_tables(
    comparison: dict[str, pl.DataFrame], verdicts: pl.DataFrame | None = None
) -> dict[str, pl.DataFrame]:
    """``overall`` (one row per headline metric: a, b, delta, ratio, unit), ``by_group`` and, when
    thresholds were given, ``gate`` (one verdict per threshold and scope)."""
    tables = {"overall": comparison["compare_overall"], "by_group": comparison["compare_by_group"]}
    return tables if verdicts is None else {**tables, "gate": verdicts}


# --------------------------------------------------------------------------------- the regression gate
def _unit(headline: str) -> str:
    from asaptrace.analyze.compare import HEADLINE_METRICS

    return next(u for m, u, _ in HEADLINE_METRICS if m == headline)


def _change(row: dict) -> str:
    """``+9.3% (noise ±2.8%)``, ``+9.3% (one step: no noise band)``: the change and its band."""
    if row["change"] is None:
        return "from zero" if row["base"] == 0 and row["new"] is not None else "unknown"
    band = (
        f"noise ±{percent(row['noise'], 1)}"
        if row["noise"] is not None
        else "no per-step values"
        if row["metric"] in ("overlap_efficiency", "utilisation")
        else "too few steps for a noise band"
    )
    return f"{row['change'] * 100:+.1f}% ({band})"


def gate_lines(verdicts: pl.DataFrame) -> list[str]:
    """One line per threshold: FAIL, ok or ?, the run's values and change, and the DP groups that fail
    (a group may fail where the run passes). ``noise``: beyond the threshold, within the steps' spread."""
    from asaptrace.analyze.gate import GATE_METRICS

    lines = []
    for (text,), rows in verdicts.group_by("threshold", maintain_order=True):
        metric = rows.get_column("metric")[0]
        headline = GATE_METRICS[metric][0]
        unit = _unit(headline)
        run = rows.filter(pl.col("scope") == "run").row(0, named=True)
        groups = rows.filter(pl.col("scope") != "run")
        failing = groups.filter(pl.col("status") == "fail").get_column("scope").to_list()
        noisy = groups.filter(pl.col("status") == "noise").get_column("scope").to_list()
        fail = run["status"] == "fail" or bool(failing)
        word = "FAIL" if fail else "?" if run["status"] == "unknown" else "ok"
        line = (
            f"{word} {text}: {metric_label(headline)} {metric_value(unit, headline, run['base'])} → "
            f"{metric_value(unit, headline, run['new'])}, {_change(run)}"
        )
        if run["status"] == "noise":
            line += ", within the noise"
        if failing:
            line += f"; {_groups(failing)} beyond it"
        if noisy:
            line += f"; {_groups(noisy)} beyond it but within the noise"
        lines.append(line)
    return lines


def _groups(scopes: list[str]) -> str:
    """``DP group 3``, ``DP groups 0–3, 6``: consecutive group numbers as ranges."""
    numbers = sorted(int(s.removeprefix("DP group ")) for s in scopes)
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    said = ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)
    return ("DP group " if len(numbers) == 1 else "DP groups ") + said


def gate_markdown(
    comparison: dict[str, pl.DataFrame], verdicts: pl.DataFrame | None, base: str, new: str
) -> str:
    """A summary a CI job posts on a pull request: the verdict, one line per threshold, then the
    headline numbers side by side (Markdown)."""
    from asaptrace.analyze.gate import failed

    out = []
    if verdicts is not None and verdicts.height:
        out.append(
            "## asaptrace: regression"
            if failed(verdicts)
            else "## asaptrace: no regression beyond the thresholds"
        )
        out.append("")
        out += [
            f"- {'**' + line[:4] + '**' + line[4:] if line.startswith('FAIL') else line}"
            for line in gate_lines(verdicts)
        ]
    else:
        out.append("## asaptrace: comparison")
    out += ["", f"BASE `{base}`, NEW `{new}`", "", "| metric | BASE | NEW | change |", "|---|---:|---:|---:|"]
    for r in comparison["compare_overall"].iter_rows(named=True):
        delta = metric_value(r["unit"], r["metric"], r["delta"], delta=True)
        out.append(
            f"| {metric_label(r['metric'])} | {metric_value(r['unit'], r['metric'], r['a'])} | "
            f"{metric_value(r['unit'], r['metric'], r['b'])} | {delta} |"
        )
    out += [
        "",
        "Change = NEW − BASE (shares in percentage points). A change beyond its threshold counts only "
        "when it is also beyond the steps' noise band (twice the standard error of the change over the steps).",
    ]
    return "\n".join(out) + "\n"
