"""`asaptrace ingest` / `info` as a user (or a script reading --json) sees them."""

from __future__ import annotations

import json

import polars as pl

from asaptrace.store import TraceStore
from tests._cli import run_cli
from tests._kineto_helpers import cpu_op, gpu_process, kernel, write_trace


def _two_ranks(tmp_path):
    for r in (0, 1):
        write_trace(
            tmp_path / "in" / f"rank{r}.json",
            [
                *gpu_process(r),
                kernel("flash_fwd", 100, 10, pid=r, corr=1),
                kernel("deep_ep::intranode::dispatch", 110, 4 + r, pid=r, corr=2),
                cpu_op("aten::mm", 90, 5),
                {"ph": "X", "name": "bad", "pid": 1, "tid": 1, "ts": "x", "dur": 1},
            ],
            rank=r,
        )
    return tmp_path / "in"


def test_info_json_is_the_documented_object(tmp_path):
    folder = _two_ranks(tmp_path)
    assert run_cli("ingest", folder, "-o", tmp_path / "s").code == 0
    run = run_cli("info", tmp_path / "s", "--json")
    assert run.code == 0
    data = json.loads(run.stdout)
    assert data["schema_version"] == 3
    assert data["accounting"] == {
        "read": 12,
        "kept": 10,
        "kept_by_table": {"events": 6, "metadata": 4},
        "rejected": {"bad_ts": 2},
        "files_unreadable": 0,
    }
    assert [
        (r["rank"], r["format"], r["events"], r["source_file"].rsplit("/", 1)[-1]) for r in data["ranks"]
    ] == [(0, "kineto", 3, "rank0.json"), (1, "kineto", 3, "rank1.json")]
    # span: earliest start 90 µs (aten::mm), latest end 110 + 5 µs (rank 1's dispatch)
    assert data["time_span"] == {"start_ns": 90_000, "end_ns": 115_000, "duration_ns": 25_000}
    # the taxonomy names flash_fwd attention and deep_ep…dispatch a dispatch
    assert data["events_by_kind"] == {"attention": 2, "dispatch": 2, "host": 2}
    assert data["device_time_by_kind_ns"] == {
        "attention": (10 + 10) * 1000,
        "dispatch": (4 + 5) * 1000,
        "host": 0,
    }
    assert len(data["sources"]) == 2 and all(len(s["sha256"]) == 64 for s in data["sources"])
    # no annotation in these ranks: no annotation time; each rank's work is one step (no gap in it)
    assert data["annotation_time_ns"] == 0
    assert [(s["step"], s["phase"]) for s in data["steps"]] == [(0, "unknown")]


def test_info_table_shows_accounting_and_ranks(tmp_path):
    folder = _two_ranks(tmp_path)
    run_cli("ingest", folder, "-o", tmp_path / "s")
    run = run_cli("info", tmp_path / "s")
    assert run.code == 0
    assert "read 12 = kept 10 (events 6, metadata 4) + rejected (bad_ts: 2)" in run.stdout
    assert "rank0.json" in run.stdout and "rank1.json" in run.stdout


def test_parallel_and_serial_ingest_give_the_same_store(tmp_path):
    folder = _two_ranks(tmp_path)
    assert run_cli("ingest", folder, "-o", tmp_path / "a", "--jobs", "1").code == 0
    assert run_cli("ingest", folder, "-o", tmp_path / "b", "--jobs", "2").code == 0
    a, b = TraceStore.open(tmp_path / "a"), TraceStore.open(tmp_path / "b")
    key = ["rank", "eid"]
    for table in ("events", "args", "streams", "ranks"):
        ta = a.read(table).with_columns(pl.col(pl.Categorical).cast(pl.String))
        tb = b.read(table).with_columns(pl.col(pl.Categorical).cast(pl.String))
        sort = key if "eid" in ta.columns else ["rank"] + [c for c in ("pid", "stream") if c in ta.columns]
        assert ta.sort(sort).equals(tb.sort(sort)), table
