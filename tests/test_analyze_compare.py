"""Headline numbers and the side-by-side comparison, on hand-built tables (worked out in comments)."""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.analyze.compare import compare, headline

MS = 1_000_000


def _tables(*, ranks, groups, step_ms, wait_ms, overlapped_ms) -> dict[str, pl.DataFrame]:
    """Two steps per rank; transfer 5 ms per step; comm 40, compute 70 + overlapped, span 200 ms per rank."""
    rows = [(r, g, s) for r, g in zip(ranks, groups, strict=True) for s in (0, 1)]
    bd = pl.DataFrame(
        {
            "rank": [r for r, _, _ in rows],
            "dp_group": [g for _, g, _ in rows],
            "step": [s for _, _, s in rows],
            "step_time_ns": [step_ms * MS] * len(rows),
            "wait_ns": [w * MS for w in wait_ms],
            "transfer_ns": [5 * MS] * len(rows),
        },
        schema_overrides={"dp_group": pl.Int32},
    )
    imb = pl.DataFrame(
        {
            "step": [0, 1],
            "tokens_ratio": [1.0, 1.2],
            "sum_sq_ratio": [2.0, 3.0],
            "attention_ratio": [1.5, 1.5],
        }
    )
    ov = pl.DataFrame(
        {
            "rank": ranks,
            "dp_group": groups,
            "span_ns": [200 * MS] * len(ranks),
            "compute_ns": [(70 + o) * MS for o in overlapped_ms],
            "comm_ns": [40 * MS] * len(ranks),
            "overlapped_ns": [o * MS for o in overlapped_ms],
        },
        schema_overrides={"dp_group": pl.Int32},
    )
    return {"step_breakdown": bd, "imbalance_by_step": imb, "overlap_by_rank": ov}


A = dict(ranks=[0, 1], groups=[0, 1], step_ms=100, wait_ms=[30, 10, 0, 0], overlapped_ms=[10, 30])
B = dict(ranks=[0, 2], groups=[0, 2], step_ms=80, wait_ms=[0, 0, 0, 0], overlapped_ms=[20, 20])


def test_headline_of_a_hand_built_run():
    h = dict(headline(_tables(**A)).select("metric", "value").iter_rows())
    assert h["n_ranks"] == 2 and h["n_steps"] == 2
    assert h["mean_step_time_ns"] == 100 * MS
    assert h["exposed_wait_ns"] == 20 * MS  # (30 + 10) ms over 2 ranks
    assert h["wait_share"] == pytest.approx(0.1)  # 40 of 400 ms
    assert h["transfer_ns"] == 10 * MS  # 4 × 5 ms over 2 ranks
    assert h["tokens_ratio"] == pytest.approx(1.1) and h["sum_sq_ratio"] == 2.5
    assert h["overlap_efficiency"] == 0.5  # (10 + 30) of 80 ms of comm
    assert h["utilisation"] == pytest.approx(0.45)  # (80 + 100) of 400 ms


def test_compare_side_by_side_with_deltas():
    c = compare(_tables(**A), _tables(**B))
    overall = {
        m: (a, b, d, r)
        for m, a, b, d, r in c["compare_overall"].select("metric", "a", "b", "delta", "ratio").iter_rows()
    }
    assert overall["mean_step_time_ns"] == (100 * MS, 80 * MS, -20 * MS, 0.8)
    assert overall["exposed_wait_ns"][1:3] == (0.0, -20 * MS)
    assert overall["wait_share"][3] == 0.0
    g = c["compare_by_group"]
    # DP0 in both; DP1 only in A, DP2 only in B (nulls on the other side)
    assert g.get_column("dp_group").to_list() == [0, 1, 2]
    row0 = g.row(0, named=True)
    assert row0["mean_step_time_ns_delta"] == -20 * MS
    assert row0["exposed_wait_ns_a"] == 40 * MS and row0["exposed_wait_ns_b"] == 0
    assert row0["overlap_efficiency_a"] == 0.25 and row0["overlap_efficiency_b"] == 0.5
    assert g.row(1, named=True)["mean_step_time_ns_b"] is None
    assert (
        g.row(2, named=True)["mean_step_time_ns_a"] is None
        and g.row(2, named=True)["overlap_efficiency_b"] == 0.5
    )


def test_compare_page_documents_exactly_these_columns():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "analyses" / "compare.md").read_text()
    documented: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in doc.splitlines():
        if m := re.match(r"^## `(\w+)`", line):
            current = documented.setdefault(m.group(1), [])
        elif (
            current is not None and (m := re.match(r"^\| (\w+) \| (\w+) \|", line)) and m.group(1) != "column"
        ):
            current.append((m.group(1), m.group(2)))
    names = {pl.Int32: "int32", pl.Float64: "float64", pl.String: "str"}
    from asaptrace.analyze.gate import parse_threshold, verdicts

    c = compare(_tables(**A), _tables(**B))
    gate = verdicts(c, _tables(**A), _tables(**B), [parse_threshold("step_time>+5%")])
    actual = {"headline": headline(_tables(**A)), **c, "gate": gate}
    assert set(documented) == set(actual)
    for name, table in actual.items():
        assert [(col, names[type(t)]) for col, t in table.schema.items()] == documented[name], name
