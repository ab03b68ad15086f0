"""Real folders (issue 13): non-traces beside the traces, a lone source without a rank, several
runs mixed together, a path given twice, the same bytes under two names."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests._cli import run_cli
from tests._kineto_helpers import kernel, write_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _info(store: Path) -> dict:
    run = run_cli("info", store, "--json")
    assert run.code == 0, run
    return json.loads(run.stdout)


def test_files_in_a_folder_that_are_not_traces_are_skipped_and_listed(tmp_path):
    run_dir = tmp_path / "run"
    write_trace(run_dir / "rank0.json", [kernel("k", 1, 1)], rank=0)
    write_trace(run_dir / "rank1.json", [kernel("k", 1, 1)], rank=1)
    (run_dir / "truth.json").write_text('{"barrier_wait_ns": 1}')  # JSON, but no trace
    (run_dir / "config.json").write_text('{"dp": 8}')
    (run_dir / "execution_details.json").write_text('{"steps": []}')
    (run_dir / "config.toml").write_text("dp = 8\n")
    (run_dir / "results.csv").write_text("a,b\n1,2\n")
    (run_dir / "README.md").write_text("# notes\n")
    run = run_cli("ingest", run_dir, "-o", tmp_path / "s.store", "-j", "1")
    assert run.code == 0, run
    # sorted by path: README.md, config.json, config.toml, execution_details.json, results.csv, truth.json
    assert (
        "skipped 6 files that are not profiler traces: README.md, config.json, config.toml, "
        "execution_details.json, results.csv and 1 more"
    ) in run.stderr
    assert "2 ranks" in run.stdout
    info = _info(tmp_path / "s.store")
    skipped = {Path(s["path"]).name: s["reason"] for s in info["discovery"]["skipped"]}
    assert skipped == {
        "truth.json": "content matches no trace format",
        "config.json": "content matches no trace format",
        "execution_details.json": "content matches no trace format",
        "config.toml": "not a trace by its name",
        "results.csv": "not a trace by its name",
        "README.md": "not a trace by its name",
    }
    text = run_cli("info", tmp_path / "s.store").stdout
    assert "skipped 6 files that are not profiler traces" in text


def test_the_bundled_sample_folder_ingests_as_it_is(tmp_path):
    folder = SAMPLES / "coupled"
    if not (folder / "truth.json").is_file():
        pytest.skip(f"{folder} is absent")
    run = run_cli("ingest", folder, "-o", tmp_path / "c.store", "-j", "2")
    assert run.code == 0, run
    # the sample holds README.md, config.toml and truth.json beside kineto/ (32 rank files)
    assert "skipped 3 files that are not profiler traces: README.md, config.toml, truth.json" in run.stderr
    assert "32 ranks" in run.stdout and "events/s)" in run.stdout


def test_several_sources_without_a_rank_say_how_to_give_them(tmp_path):
    a = write_trace(tmp_path / "in" / "a.json", [kernel("k", 1, 1)], rank=None)
    b = write_trace(tmp_path / "in" / "b.json", [kernel("k", 1, 1)], rank=None)
    run = run_cli("ingest", a, b, "-o", tmp_path / "o.store")
    assert run.code == 2 and len(run.stderr.strip().splitlines()) == 1, run
    assert "cannot tell which rank" in run.stderr and "--rank-from order" in run.stderr
    assert "--rank-map" in run.stderr and not (tmp_path / "o.store").exists()


def test_a_single_real_trace_without_a_rank_is_rank_0(shared_data, tmp_path):
    # the Ascend sample's timeline says no rank (no rank in its content or its name)
    timeline = shared_data / "traces" / "ascend-sample" / "trace_view.json"
    run = run_cli("ingest", timeline, "-o", tmp_path / "a.store", "-j", "1")
    assert run.code == 0, run
    assert "it is rank 0 (rank_source single-file)" in run.stderr and "1 rank," in run.stdout
    assert [(r["rank"], r["rank_source"]) for r in _info(tmp_path / "a.store")["ranks"]] == [
        (0, "single-file")
    ]


def test_a_path_given_twice_is_read_once_and_said(tmp_path):
    t = write_trace(tmp_path / "in" / "rank0.json", [kernel("k", 1, 1)], rank=0)
    run = run_cli("ingest", t, t, "-o", tmp_path / "o.store", "-j", "1")
    assert run.code == 0, run
    assert "named more than once, read once: rank0.json" in run.stderr and "1 rank," in run.stdout


def test_byte_identical_files_under_two_names_warn(tmp_path):
    a = write_trace(tmp_path / "in" / "x.json", [kernel("k", 1, 1)], rank=None)
    shutil.copy(a, tmp_path / "in" / "y.json")
    run = run_cli("ingest", tmp_path / "in", "-o", tmp_path / "o.store", "--rank-from", "order", "-j", "1")
    assert run.code == 0, run
    want = "x.json and y.json are byte-identical (same sha256): one trace read as 2 ranks"
    assert f"warning: {want}" in run.stderr
    assert _info(tmp_path / "o.store")["discovery"]["warnings"] == [want]


def test_runs_far_apart_in_time_with_other_world_sizes_warn(tmp_path):
    # rank 0 runs 1-2 µs, rank 1 starts a day later (86 400 s = 8.64e10 µs): no instant in both;
    # and they claim world sizes 8 and 2
    a = write_trace(tmp_path / "in" / "a.json", [kernel("k", 1, 1)], rank=None)
    b = tmp_path / "in" / "b.json"
    b.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2},
                "traceEvents": [kernel("k", 86_400_000_000 + 2, 1)],
            }
        )
    )
    run = run_cli("ingest", a, b, "-o", tmp_path / "o.store", "--rank-from", "order", "-j", "1")
    assert run.code == 0, run
    warnings = _info(tmp_path / "o.store")["discovery"]["warnings"]
    assert warnings == [
        "the files' time ranges do not overlap (a.json ends 1 day before b.json starts): they look like "
        "several runs mixed together; their cross-rank findings are not meaningful"
    ]
    assert "warning: the files' time ranges do not overlap" in run.stderr
    assert "warning: the files' time ranges do not overlap" in run_cli("info", tmp_path / "o.store").stdout
    # and beside the findings, where a "slow device" would otherwise be believed
    assert "note: the files' time ranges do not overlap" in " ".join(
        run_cli("analyze", tmp_path / "o.store").stdout.split()
    )


def test_real_traces_of_unrelated_runs_mixed_by_order_warn(shared_data, tmp_path):
    # DLRM's 8 ranks (world size 8, 2023) with HTA's samples (world sizes 2 and 128, 390 days apart)
    traces = shared_data / "traces"
    args = [
        "ingest",
        traces / "kineto-dlrm-8rank",
        traces / "kineto-hta-samples",
        "-o",
        tmp_path / "mix.store",
    ]
    # V100s and A100s: an order alone does not mix device types (one line naming both, nothing written)
    refused = run_cli(*args, "--rank-from", "order", "--no-enrich")
    assert refused.code == 2 and len(refused.stderr.strip().splitlines()) == 1, refused
    assert "different device types (NVIDIA A100-PG509-200: nccl_data.json.gz; Tesla V100-SXM2-32GB: " in (
        refused.stderr
    )
    assert "--mix-devices" in refused.stderr and not (tmp_path / "mix.store").exists()
    run = run_cli(*args, "--rank-from", "order", "--no-enrich", "--mix-devices")
    assert run.code == 0, run
    warnings = _info(tmp_path / "mix.store")["discovery"]["warnings"]
    assert any(w.startswith("the files say different world sizes (2, 8, 128)") for w in warnings), warnings
    assert any("time ranges do not overlap" in w and "days before" in w for w in warnings), warnings
    # DLRM ran on V100s, HTA's samples on A100s (their deviceProperties say so)
    assert any(
        w.startswith("the files were profiled on different devices (") and "Tesla V100-SXM2-32GB" in w
        for w in warnings
    ), warnings
    # the LICENSE files beside the traces are listed, each with its folder (same name twice)
    assert "kineto-dlrm-8rank/LICENSE, kineto-hta-samples/LICENSE" in run.stderr


def test_one_run_gives_no_warning(tmp_path):
    # two ranks of one job: overlapping spans, one world size
    write_trace(tmp_path / "in" / "rank0.json", [kernel("k", 1, 10)], rank=0)
    write_trace(tmp_path / "in" / "rank1.json", [kernel("k", 3, 10)], rank=1)
    run = run_cli("ingest", tmp_path / "in", "-o", tmp_path / "o.store", "-j", "1")
    assert run.code == 0 and "warning" not in run.stderr, run
    assert _info(tmp_path / "o.store")["discovery"] == {
        "skipped": [],
        "repeated": [],
        "unreadable": [],
        "warnings": [],
    }


def test_run_warnings_by_hand():
    from asaptrace.ingest.discovery import SourceFacts, run_warnings

    # same job: spans 0-10 and 5-15 share 5-10; one world size; one device model; distinct bytes
    one = [
        SourceFacts("a.json", "h1", 0, 10, 2, "H100"),
        SourceFacts("b.json", "h2", 5, 15, 2, "H100"),
    ]
    assert run_warnings(one) == []
    # spans 0-10 and 12-20 share no instant (gap 2 ns); models differ
    two = [
        SourceFacts("a.json", "h1", 0, 10, None, "H100"),
        SourceFacts("b.json", "h2", 12, 20, None, "MI300X"),
    ]
    assert run_warnings(two) == [
        "the files were profiled on different devices (H100, MI300X): they look like several runs mixed together",
        "the files' time ranges do not overlap (a.json ends 2 ns before b.json starts): they look like "
        "several runs mixed together; their cross-rank findings are not meaningful",
    ]
