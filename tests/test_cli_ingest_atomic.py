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


def test_an_error_while_deciding_fails_the_ingest_and_leaves_nothing(tmp_path, monkeypatch):
    """An error in the run-wide decision (clock offsets, topology, batches), after every file was
    read and segmented, fails the ingest with that error: nothing at the output, and no final part
    was written before the decision was known."""
    import pytest

    from asaptrace.enrich import streaming
    from asaptrace.errors import UsageError
    from asaptrace.pipeline import build_store
    from asaptrace.store import StoreWriter

    staged: list[str] = []
    real_stage = StoreWriter.write_staged_part

    def stage(self, name, part_id, table):
        staged.append(name)
        return real_stage(self, name, part_id, table)

    def bad_decision(*args, **kwargs):
        raise UsageError("--parallel dp=3 does not divide the 2 ranks")

    monkeypatch.setattr(StoreWriter, "write_staged_part", stage)
    monkeypatch.setattr(streaming, "decide", bad_decision)
    ranks = [
        write_trace(tmp_path / "in" / f"rank{r}.json", [kernel("flash_fwd", 1, 1)], rank=r) for r in (0, 1)
    ]
    with pytest.raises(UsageError, match="does not divide"):
        build_store(ranks, tmp_path / "out", jobs=2)
    assert staged == []
    _nothing_left(tmp_path)
