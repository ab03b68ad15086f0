"""The critical path as a human sees it: per window its length and split, the ranks it crossed,
the top kernels with their what-if, and the path itself (every face: CLI, report, dashboard, JSON)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from asaptrace.views.table import TableView

if TYPE_CHECKING:
    from asaptrace.analyze.critical import CriticalPaths

#: ``critical --json``'s schema (docs/reference/critical-json.md)
SCHEMA_VERSION = 1
_KINDS = ("compute", "copy", "transfer", "barrier", "launch", "sync", "host", "gap")


def _short(col: str = "name") -> pl.Expr:
    """A kernel's name without ``void``, anonymous namespaces, template arguments, parameters and
    its namespace path (the whole name, cut, when nothing is left)."""
    e = pl.col(col).str.replace(r"^void ", "").str.replace_all("(anonymous namespace)::", "", literal=True)
    for _ in range(4):  # nested templates, innermost first
        e = e.str.replace_all(r"<[^<>]*>", "")
    e = e.str.replace(r"\(.*$", "").str.replace(r"^.*::", "")
    return pl.when(e.str.len_chars() > 0).then(e).otherwise(pl.col(col).str.slice(0, 40)).alias(col)


def critical_views(cp: CriticalPaths, *, path_rows: int = 20) -> list[TableView]:
    """The tables: lengths and split per window, time on the path by rank, top kernels (what-if),
    and the path's longest pieces."""
    steps = cp.steps
    split = [f"{k}_ns" for k in _KINDS if steps.height and steps.get_column(f"{k}_ns").sum() > 0]
    cols = ["label", "length_ns", *split, "span_ns", "hops"]
    views = [
        TableView(
            "Critical path per window",
            cols,
            steps.select(cols),
            caption="length = the time on the path (host ops, device spans, launch delays, gaps between kernels); "
            "its parts by kind sum to it; span = the window's extent; hops = collective instances the path "
            "crossed to the last rank to arrive.",
            name="critical-steps",
        )
    ]
    rk = cp.by_rank.join(steps.select("window", "label"), on="window").sort(
        ["window", "on_path_ns"], descending=[False, True]
    )
    views.append(
        TableView(
            "Time on the path by rank",
            ["label", "rank", "on_path_ns"],
            rk.select("label", "rank", "on_path_ns"),
            name="critical-ranks",
        ).head(16)
    )
    kn = cp.kernels.join(steps.select("window", "label"), on="window").with_columns(_short())
    kcols = ["label", "name", "kind", "count", "on_path_ns", "gain_ns"]
    views.append(
        TableView(
            "Top kernels on the path, and the step if each were faster",
            kcols,
            kn.select(kcols),
            caption="gain = how much shorter the window is with every span of the kernel 20 % shorter, the graph "
            "re-walked (never more than its shortening on the path; 0 when another chain is as long).",
            name="critical-kernels",
            labels=["window", "kernel", "kind", "spans", "on path", "gain if 20 % faster"],
        )
    )
    longest = (
        cp.path.join(steps.select("window", "label"), on="window")
        .with_columns(_short(), dur_ns=pl.col("end_ns") - pl.col("start_ns"))
        .sort("dur_ns", descending=True)
    )
    views.append(
        TableView(
            "Longest pieces of the path",
            ["label", "rank", "kind", "name", "dur_ns"],
            longest.select("label", "rank", "kind", "name", "dur_ns"),
            name="critical-path",
        ).head(path_rows)
    )
    return views


def critical_json(cp: CriticalPaths, store: str) -> dict[str, Any]:
    """``critical --json``: per window its length, split, ranks, top kernels and the path as rows of
    rank, kind, name, start_ns, end_ns."""
    windows = []
    for row in cp.steps.iter_rows(named=True):
        w = row["window"]
        windows.append(
            {
                "window": w,
                "label": row["label"],
                "length_ns": row["length_ns"],
                "span_ns": row["span_ns"],
                "n_ranks": row["n_ranks"],
                "hops": row["hops"],
                "split_ns": {k: row[f"{k}_ns"] for k in _KINDS},
                "by_rank_ns": {
                    str(r["rank"]): r["on_path_ns"]
                    for r in cp.by_rank.filter(pl.col("window") == w).iter_rows(named=True)
                },
                "kernels": cp.kernels.filter(pl.col("window") == w).drop("window").to_dicts(),
                "path": cp.path.filter(pl.col("window") == w)
                .select("rank", "kind", "name", "start_ns", "end_ns")
                .to_dicts(),
            }
        )
    return {"schema_version": SCHEMA_VERSION, "store": store, "notes": cp.notes, "windows": windows}
