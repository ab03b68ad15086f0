"""What the CLI shows around its results: progress phases, --csv, -h, --jobs, and tables that
read at 80 columns (issue 13, tables and progress)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from asaptrace.pipeline import build_store
from tests._cli import run_cli
from tests._kineto_helpers import kernel, write_trace


def _two_ranks(tmp_path: Path) -> Path:
    write_trace(tmp_path / "in" / "rank0.json", [kernel("flash_fwd", 1, 10)], rank=0)
    write_trace(tmp_path / "in" / "rank1.json", [kernel("flash_fwd", 2, 10)], rank=1)
    return tmp_path / "in"


def test_the_enrichment_reports_its_phases(tmp_path):
    seen: list[tuple[str, int, int]] = []
    build_store([_two_ranks(tmp_path)], tmp_path / "s.store", enrich_progress=lambda *a: seen.append(a))
    # two ranks, one group (asaptrace.enrich.streaming): segmented together (0/2), the cross-rank
    # decisions, each rank written (0/2, 1/2), then 2/2 written
    assert seen[0][0] == "names"
    assert [s for s in seen if s[0] == "segment"] == [("segment", 0, 2)]
    assert ("align clocks, roles, batches", 0, 1) in seen
    assert [s for s in seen if s[0] == "write"] == [("write", 0, 2), ("write", 1, 2), ("write", 2, 2)]
    assert seen[-1] == ("write", 2, 2)


def test_synth_reports_its_phases(tmp_path):
    from asaptrace.synth import load_config, synthesize

    seen: list[tuple[str, int, int]] = []
    res = synthesize(load_config("coupled", steps=1), tmp_path / "run", progress=lambda *a: seen.append(a))
    writes = [s for s in seen if s[0] == "write kineto"]
    assert seen[0] == ("simulate", 0, 1) and seen[-1] == ("truth", res.world_size, res.world_size)
    assert writes == [("write kineto", r, res.world_size) for r in range(res.world_size)]


def test_csv_says_where_it_wrote(tmp_path):
    build_store([_two_ranks(tmp_path)], tmp_path / "s.store")
    run = run_cli("analyze", tmp_path / "s.store", "--csv", tmp_path / "tables")
    assert run.code == 0, run
    written = sorted(p.name for p in (tmp_path / "tables").iterdir())
    assert f"wrote {len(written)} tables as CSV to {tmp_path / 'tables'}/" in run.stderr
    assert "barrier_by_group.csv" in written and not [n for n in written if n.startswith(".")]


def test_dash_h_is_help_and_jobs_says_its_default_and_refuses_zero_and_negatives():
    assert run_cli("-h").stdout == run_cli("--help").stdout
    help_text = run_cli("ingest", "-h").stdout
    assert "Files read at once (default: one per CPU" in " ".join(help_text.replace("│", " ").split())
    for bad in ("0", "-1"):
        run = run_cli("ingest", ".", "-o", "x.store", "--jobs", bad)
        text = " ".join(run.stderr.replace("│", " ").split())  # click's error box, unwrapped
        assert run.code == 2 and "Invalid value for '--jobs'" in text and "greater than or equal to 1" in text


def test_findings_header_says_unknown_never_a_question_mark(tmp_path):
    build_store([_two_ranks(tmp_path)], tmp_path / "s.store")
    out = run_cli("analyze", tmp_path / "s.store").stdout
    assert "?" not in out.splitlines()[0]


@pytest.fixture(scope="module")
def coupled_analysis_at_80(coupled_store) -> str:
    env = {**os.environ, "COLUMNS": "80"}
    run = subprocess.run(
        [sys.executable, "-m", "asaptrace.cli", "analyze", str(coupled_store.path)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_tables_read_at_80_columns(coupled_analysis_at_80):
    text = coupled_analysis_at_80
    # (the first line names the store by its path, which is as long as it is)
    assert max(len(line) for line in text.splitlines()[1:]) <= 80
    # headers wrap between words, never inside one: each header word is whole on some line
    for word in ("overlapped", "efficiency", "utilisation", "imposed", "attention", "requests"):
        assert any(word in line.split() for line in text.splitlines()), word
    # a *_ns column shown in seconds says so in its header, not in every cell
    assert "(s)" in text and " s " not in text.split("Barrier wait by DP group")[1].split("\n\n\n")[0]


def test_a_cut_table_says_how_many_rows_more(coupled_analysis_at_80, coupled_store):
    # the coupled sample: 61 layers with barriers, 12 shown → 49 more; the stragglers table has
    # 31 ranks that were ever last (all but one), 12 shown → 19 more
    from asaptrace.pipeline import diagnose_store

    t = diagnose_store(coupled_store).tables
    layers = t["barrier_by_layer"].height
    assert f"… and {layers - 12} more rows (--json has them all)" in coupled_analysis_at_80
