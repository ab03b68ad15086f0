"""The faces of the critical path: ``asaptrace critical`` (tables, --json, bad input) and the
Perfetto export's critical-path track, on the two-rank hand-worked window of
tests/test_analyze_critical.py written as a store."""

from __future__ import annotations

import json

import polars as pl
import pytest

from asaptrace.analyze.critical import critical_path
from asaptrace.export.perfetto import CRITICAL_CAT, CRITICAL_TID, export_perfetto
from tests._cli import run_cli
from tests.test_analyze_critical import TWO_RANKS, _events, _ranks


@pytest.fixture(scope="module")
def coupled(sample_run):
    _truth, store, _diag = sample_run("coupled")
    return store


def test_json_has_per_window_length_split_and_path_rows(coupled):
    r = run_cli("critical", coupled.path, "--json", "--top", "2")
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1
    # the synthetic run records no event waits between its streams, and says what that means
    assert any("no event waits" in n for n in doc["notes"])
    w = doc["windows"][0]
    assert sum(w["split_ns"].values()) == w["length_ns"]
    assert sum(w["by_rank_ns"].values()) == w["length_ns"]
    assert set(w["path"][0]) == {"rank", "kind", "name", "start_ns", "end_ns"}
    assert len(w["kernels"]) <= 2
    assert all(0 <= k["gain_ns"] <= k["shortening_ns"] for k in w["kernels"])
    # path rows run forward in time
    ends = [p["end_ns"] for p in w["path"]]
    assert ends == sorted(ends)


def test_tables_fit_80_columns(coupled, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    r = run_cli("critical", coupled.path)
    assert r.code == 0, r.stderr
    assert "Critical path per window" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80


def test_bad_input_is_one_line(coupled, tmp_path):
    for args, words in (
        (("critical", tmp_path / "nope"), "no such store"),
        (("critical", coupled.path, "--annotation", "NoSuchThing"), "no annotation named like 'NoSuchThing'"),
        (("critical", coupled.path, "--top", "-1"), "--top"),
    ):
        r = run_cli(*args)
        assert r.code == 2
        assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_export_draws_the_path_across_ranks():
    ev, rk = _events(TWO_RANKS), _ranks(2)
    cp = critical_path(ev, rk)
    empty = pl.DataFrame(
        schema={"instance": pl.Int64, "rank": pl.Int32, "wait_ns": pl.Int64, "arrival_ns": pl.Int64}
    )
    doc = export_perfetto(ev, rk, empty, critical_path=cp.path)
    slices = [e for e in doc["traceEvents"] if e.get("cat") == CRITICAL_CAT and e["ph"] == "X"]
    assert [(e["pid"], e["tid"], e["name"]) for e in slices] == [
        (1, CRITICAL_TID, "compute · Kb"),
        (1, CRITICAL_TID, "barrier · AllReduce"),
        (0, CRITICAL_TID, "transfer · AllReduce"),
        (0, CRITICAL_TID, "compute · Kafter0"),
    ]
    arrows = [e for e in doc["traceEvents"] if e.get("cat") == CRITICAL_CAT and e["ph"] in "sf"]
    assert len(arrows) == 6  # one s/f pair between each two consecutive pieces
    hop = [e for e in arrows if e["ph"] == "f" and e["pid"] == 0]
    assert hop and {e["id"] for e in hop} <= {e["id"] for e in arrows if e["ph"] == "s"}


def test_timeline_draws_the_steps_critical_path_over_its_lanes(coupled):
    from asaptrace_dashboards.pages import timeline
    from asaptrace_dashboards.state import Stores

    stores = Stores([coupled.path])
    _steps, step, _lo, _hi, window, _marks, _ranks, _focus, _msg = timeline.timeline_controls(stores, "0")
    # added over the lanes once walked (the lanes never wait for it)
    patch, _note = timeline.critical_patch(stores, timeline.drawn_window("0", step, window, None))
    line = patch.to_plotly_json()["operations"][0]["params"]["value"]
    assert line.name == "critical path"
    path = stores.get("0").critical_path()
    spans = stores.get("0").timeline(step, tuple(window), None)
    lo, hi = spans["start_ns"].min(), spans["end_ns"].max()
    inside = path.filter((pl.col("window") == step) & (pl.col("end_ns") >= lo) & (pl.col("start_ns") <= hi))
    assert inside.height > 0 and len(line.x) == 2 * inside.height  # each piece: its start and its end
    # the line hops between ranks where the path crosses a collective
    assert inside.get_column("rank").n_unique() > 1
