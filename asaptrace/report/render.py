"""The diagnostic report: one self-contained HTML file (or Markdown) from a Diagnosis.

:func:`render_report` lays out, top to bottom: a summary in plain words (the ranked findings), the
headline numbers, the figures (``asaptrace.viz``), the key tables, an optional comparison with a
second run, the sections other layers add (``sections=``, see :mod:`asaptrace.report.sections`), the
run's provenance (sources with sizes and hashes, event accounting, clock alignment, taxonomy; for a
replayed store, what it replays and the replay's reproduction error) and
the exact command that made it.

Safe and offline by construction:

* Jinja2 with autoescaping renders every trace-derived string (kernel names in findings, source
  paths, table cells) as text; figure JSON comes from plotly's encoder, which escapes ``<``, ``>``
  and ``/`` so no string can close the ``<script>``; names inside figures are made inert for
  plotly's own label markup (:func:`asaptrace.viz.theme.plain`).
* plotly.js is inlined once, every figure is drawn by one script; no ``src``/``href`` points
  outside the file, so opening it from disk makes no network request.
* Deterministic: fixed div ids, JSON by the standard encoder, no clock read — the same store and
  command give the same bytes (the test of ``reports/`` relies on it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import jinja2
import plotly.io as pio
import polars as pl
from plotly.offline import get_plotlyjs

from asaptrace import __version__
from asaptrace.analyze.compare import HEADLINE_METRICS, compare, headline
from asaptrace.info import deployment_phrase, steps_text
from asaptrace.report.replay_sweep import replay_provenance
from asaptrace.report.sections import FigureView, Section
from asaptrace.units import (
    format_table,
    human_bytes,
    human_ns,
    metric_label,
    metric_value,
    more_rows,
    percent,
)
from asaptrace.views.compare import compare_views
from asaptrace.views.diagnosis import shown_tables
from asaptrace.views.store import clock_status_text
from asaptrace.views.table import TableView
from asaptrace.viz import barrier, breakdown, imbalance, timeline

if TYPE_CHECKING:
    from asaptrace.analyze.diagnosis import Diagnosis

Format = Literal["html", "md"]

#: Section ids, in order (the browser test checks each is present).
SECTION_IDS = ("summary", "headline", "figures", "tables", "provenance", "command")


# --------------------------------------------------------------------------------------------- parts
def report_figures(
    tables: dict[str, pl.DataFrame], *, timeline_spans: pl.DataFrame | None = None
) -> list[FigureView]:
    """The built-in figures, in report order (the timeline first when spans are given)."""
    t = tables
    figs = []
    if timeline_spans is not None:
        figs.append(
            FigureView(
                "fig-timeline",
                timeline.timeline_figure(
                    timeline_spans, title="Device timeline (the window named above the figures)"
                ),
                timeline.timeline_caption(timeline_spans),  # true for the window shown
            )
        )
    figs += [
        FigureView(
            "fig-wait-heatmap",
            barrier.wait_heatmap(t["barrier_by_rank_layer"], instances=t.get("barrier_instances")),
        ),
        FigureView(
            "fig-imposed-wait",
            barrier.imposed_wait_ranking(t["barrier_by_group"], by_rank=t.get("barrier_by_rank")),
        ),
        FigureView("fig-rank-bars", breakdown.rank_stacked_bars(t["step_breakdown"])),
        FigureView("fig-group-bars", breakdown.group_stacked_bars(t["step_breakdown"], t["stragglers"])),
        FigureView(
            "fig-attention-sumsq", imbalance.attention_vs_sum_sq(t["imbalance_by_group"], t["imbalance_fit"])
        ),
        FigureView("fig-imbalance-ratios", imbalance.imbalance_ratios(t["imbalance_by_step"])),
        FigureView("fig-overlap", breakdown.overlap_per_device(t["overlap_by_rank"])),
    ]
    return figs


def key_tables(tables: dict[str, pl.DataFrame], batches_source: str | None = None) -> list[TableView]:
    """The key tables, chosen and ordered by :func:`asaptrace.views.diagnosis.shown_tables` (as in the CLI)."""
    return shown_tables(tables, batches_source)


def _table_context(v: TableView) -> dict[str, Any]:
    """A table as the template shows it: at most ``max_rows`` rows, its HTML id ``table-<name>``."""
    cols = list(v.columns) or v.rows.columns
    labels = None
    if v.labels and len(v.labels) == len(cols) and all(c in v.rows.columns for c in cols):
        labels = list(v.labels)
    cols = [c for c in cols if c in v.rows.columns]
    headers, rows = format_table(cols, v.rows.head(v.max_rows).iter_rows(named=True), labels)
    more = max(v.rows.height - v.max_rows, 0)
    return {
        "id": "table-" + v.name.replace("_", "-"),
        "title": v.title,
        "caption": v.caption,
        "columns": headers,
        "rows": rows,
        "reason": "" if rows else (v.reason or "none"),
        "more": more_rows(more).replace("--json", "asaptrace analyze --json") if more else "",
    }


def _shown_path(path: str, root: Path | None) -> str:
    if root is None:
        return path
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return path


def _provenance(diag: Diagnosis, store_meta: dict[str, Any], root: Path | None) -> dict[str, Any]:
    acc = store_meta.get("accounting") or {}
    clock_t = diag.tables["clock"]
    residual = clock_t.get_column("residual_ns")
    clock = dict(diag.meta.get("clock") or store_meta.get("clock") or {})
    clock_rows = {
        "status": clock_status_text(clock.get("status")),
        "reference rank": clock.get("reference_rank", "–"),
        "instances used": clock.get("n_instances", "–"),
        "largest offset": human_ns(clock_t.get_column("offset_ns").abs().max())  # type: ignore[arg-type]
        if clock_t.height > 1
        else "–",
        "largest residual": human_ns(residual.abs().max()) if residual.drop_nulls().len() else "–",  # type: ignore[arg-type]
        # the reference rank is the clock the others are aligned to: never "not aligned" itself
        # (a single rank has no residual, and nothing to align)
        "ranks not aligned": str(
            clock_t.filter(
                pl.col("residual_ns").is_null() & pl.col("rank").ne_missing(clock.get("reference_rank"))
            ).height
        ),
    }
    taxonomy = store_meta.get("taxonomy") or {}
    return {
        "sources": [
            {
                "path": _shown_path(str(s.get("path", "")), root),
                "format": s.get("format", "–"),
                "rank": s.get("rank", "–"),
                "size": human_bytes(int(s.get("size") or 0)),
                "sha256": s.get("sha256", "–"),
                "read": f"{(s.get('accounting') or {}).get('read', 0):,}",
            }
            for s in store_meta.get("sources", [])
        ],
        "accounting": {
            "read": f"{acc.get('read', 0):,}",
            "kept": f"{acc.get('kept', 0):,}",
            "kept_by_table": ", ".join(f"{k} {v:,}" for k, v in (acc.get("kept_by_table") or {}).items()),
            "rejected": ", ".join(f"{k}: {v:,}" for k, v in (acc.get("rejected") or {}).items()) or "none",
        },
        "clock": clock_rows,
        "clock_notes": clock.get("notes", []),
        "taxonomy": {
            "label": taxonomy.get("label") or diag.meta.get("taxonomy_profile") or "–",
            "profiles": [
                f"{p.get('name')} v{p.get('version')} ({p.get('source')})"
                for p in taxonomy.get("profiles", [])
            ],
        },
        "parallel": ", ".join(
            f"{k}={v}" for k, v in (diag.meta.get("parallel") or {}).items() if v is not None
        ),
        "segmentation": ", ".join(
            [
                *(
                    f"{k.replace('_', ' ')}: {v}"
                    for k, v in (diag.meta.get("segmentation") or {}).items()
                    if k not in ("notes", "steps")
                ),
                *(
                    [f"phases: {steps_text(diag.meta)}"]
                    if (diag.meta.get("segmentation") or {}).get("steps")
                    else []
                ),
            ]
        ),
        "batches_source": diag.meta.get("batches_source") or "–",
        "notes": list(diag.notes),
        "store_version": store_meta.get("asaptrace_version", "–"),
        "replay": replay_provenance(store_meta.get("replay")),
    }


def _headline_rows(h: pl.DataFrame) -> list[dict[str, Any]]:
    meaning = {m: text for m, _, text in HEADLINE_METRICS}
    return [
        {
            "metric": m,
            "label": metric_label(m),
            "meaning": meaning[m],
            "value": metric_value(u, m, v),
            "raw": "" if v is None else repr(v),
        }
        for m, u, v in h.iter_rows()
    ]


def _lead_sentence(diag: Diagnosis, h: dict[str, float | None]) -> str:
    deployment = deployment_phrase(diag.meta.get("parallel"), int(h["n_ranks"] or 0) or None)
    share = h.get("wait_share")
    return (
        f"{deployment}, {steps_text(diag.meta, int(h['n_steps'] or 0))}: "
        f"mean step time {human_ns(h['mean_step_time_ns'])}"
        + (
            f", of which {percent(share, 1)} is exposed wait (at barriers, or for results where there is no barrier)."
            if share is not None
            else "."
        )
    )


# --------------------------------------------------------------------------------------------- render
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("asaptrace.report", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "html.j2"), default_for_string=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


#: What Markdown would read as markup in text outside a code span: a backslash, a ``<`` that could
#: open an HTML tag or autolink (``<script``, ``</b``, ``<!--``), an ``&`` that could spell an entity
#: (``&lt;``). A ``<`` before a digit or space (``kernel<4, bf16>``, ``<1K``) opens nothing and stays
#: as it is, so kernel names read in the raw file as they do in the trace.
_MD_ACTIVE = re.compile(r"\\|<(?=[A-Za-z/!?])|&(?=#?\w+;)")
#: A code span: Markdown shows its inside literally, so nothing in it is escaped but the pipe.
_MD_CODE = re.compile(r"(`[^`]*`)")


def _md(text: Any) -> str:
    """Markdown cell/paragraph text: only what Markdown would act on is backslash-escaped.

    Why not HTML entities: a Markdown file is also read raw (a terminal, a diff), where ``&lt;`` is
    noise; a backslash escape renders as the bare character and keeps the raw text close to the
    trace's. Code spans (``asaptrace advise``) are kept, their inside as written; a pipe is escaped
    everywhere (a GitHub table splits cells on it even in a code span, and unescapes it there);
    newlines become spaces so a string cannot end a table row or a list item.
    """
    parts = _MD_CODE.split(str(text))
    for i in range(0, len(parts), 2):  # even parts lie outside code spans
        parts[i] = _MD_ACTIVE.sub(lambda m: "\\" + m.group(0), parts[i])
    return "".join(parts).replace("|", "\\|").replace("\n", " ")


def render_report(
    diagnosis: Diagnosis,
    store_meta: dict[str, Any],
    *,
    command: str,
    title: str | None = None,
    store_label: str | None = None,
    timeline_spans: pl.DataFrame | None = None,
    timeline_window: str = "",
    compare_with: tuple[str, Diagnosis] | None = None,
    sections: Sequence[Section] = (),
    path_root: Path | None = None,
    fmt: Format = "html",
) -> str:
    """The report of one Diagnosis as HTML (self-contained, offline) or Markdown.

    ``store_meta`` is the store's ``meta.json`` (sources, accounting, taxonomy); ``command`` is shown
    verbatim; ``timeline_spans`` (:func:`asaptrace.viz.timeline.timeline_spans`) adds the device
    timeline; ``compare_with = (label, other)`` adds a side-by-side section; ``path_root`` shows
    source paths relative to it.
    """
    t = diagnosis.tables
    label = store_label or str(diagnosis.meta.get("store") or "store")
    h = headline(t)
    hv = dict(h.select("metric", "value").iter_rows())
    figures = report_figures(t, timeline_spans=timeline_spans) if fmt == "html" else []
    every_figure = figures + [f for s in sections for f in s.figures]
    comparison = None
    if compare_with is not None:
        other_label, other = compare_with
        overall, by_group = compare_views(compare(t, other.tables), f"{label} (a)", f"{other_label} (b)")
        comparison = {
            "label": other_label,
            "overall": _table_context(overall),
            "by_group": _table_context(by_group),
        }
    context = {
        "title": title or f"asaptrace report: {label}",
        "store_label": label,
        "version": __version__,
        "lead": _lead_sentence(diagnosis, hv),
        "findings": [{"severity": f.severity, "code": f.code, "text": f.text} for f in diagnosis.findings],
        "headline": _headline_rows(h),
        "figures": [{"id": f.id, "caption": f.caption} for f in figures],
        "timeline_window": timeline_window,
        "tables": [_table_context(v) for v in key_tables(t, diagnosis.meta.get("batches_source"))],
        "comparison": comparison,
        "sections": [
            {
                "id": s.id,
                "title": s.title,
                "text": s.text,
                "figures": [{"id": f.id, "caption": f.caption} for f in s.figures],
                "tables": [_table_context(v) for v in s.tables],
                "lines": list(s.lines),
                "top": s.top,
            }
            for s in sections
        ],
        "provenance": _provenance(diagnosis, store_meta, path_root),
        "command": command,
    }
    env = _environment()
    if fmt == "md":
        env.filters["md"] = _md
        return env.get_template("report.md.j2").render(**context)
    context["css"] = files("asaptrace.report").joinpath("templates/report.css").read_text()
    context["plotlyjs"] = get_plotlyjs()
    context["figures_json"] = (
        "{"
        + ",".join(
            f"{json.dumps(f.id)}:{pio.to_json(f.figure, validate=False, engine='json')}" for f in every_figure
        )
        + "}"
    )
    return env.get_template("report.html.j2").render(**context)
