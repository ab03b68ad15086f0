"""`asaptrace ingest` is all or nothing: a bad enrichment option or input leaves no store at all."""

from __future__ import annotations

from tests._cli import run_cli
from tests._kineto_helpers import kernel, write_trace


def _trace(tmp_path):
    return write_trace(tmp_path / "in" / "rank0.json", [kernel("flash_fwd", 1, 1)], rank=0)


def _nothing_left(tmp_path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"], list(tmp_path.iterdir())


def test_bad_parallel_spec_fails_before_any_store_is_written(tmp_path):
    run = run_cli("ingest", _trace(tmp_path), "-o", tmp_path / "out", "--parallel", "dp=eight")
    assert run.code == 2 and len(run.stderr.strip().splitlines()) == 1, run
    _nothing_left(tmp_path)


def test_missing_taxonomy_file_fails_cleanly(tmp_path):
    run = run_cli("ingest", _trace(tmp_path), "-o", tmp_path / "out", "--taxonomy", tmp_path / "nope.toml")
    assert run.code == 2 and "nope.toml" in run.stderr, run
    _nothing_left(tmp_path)


def test_bad_batches_sidecar_names_file_and_line(tmp_path):
    sidecar = tmp_path / "in" / "batches.jsonl"
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    sidecar.write_text('{"step": 0, "dp_group": 0, "seq_len": 5}\nnot json\n')
    run = run_cli("ingest", _trace(tmp_path), "-o", tmp_path / "out", "--batches", sidecar)
    assert run.code == 2 and "batches.jsonl" in run.stderr, run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]
