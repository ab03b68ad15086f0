"""Bad input: one line naming the file and the cause, exit code 2, and no store left behind."""

from __future__ import annotations

import gzip
import json

import pytest

from tests._cli import run_cli
from tests._kineto_helpers import kernel, write_trace


def _assert_clean_failure(tmp_path, run, *fragments: str) -> None:
    assert run.code == 2, run
    lines = [ln for ln in run.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr
    for frag in fragments:
        assert frag in lines[0], lines[0]
    left = [p.name for p in tmp_path.iterdir() if p.name.startswith((".out", "out"))]
    assert left == [], f"something was left behind: {left}"


def _good(tmp_path, name="good.json", rank=0):
    return write_trace(tmp_path / "in" / name, [kernel("k", 1, 1)], rank=rank)


def test_truncated_gzip(tmp_path):
    data = gzip.compress(json.dumps({"traceEvents": [kernel("k", 1, 1)] * 200}).encode())
    bad = tmp_path / "in" / "rank-1.json.gz"
    bad.parent.mkdir()
    bad.write_bytes(data[: len(data) // 2])
    run = run_cli("ingest", _good(tmp_path), bad, "-o", tmp_path / "out")
    _assert_clean_failure(tmp_path, run, str(bad), "truncated gzip")


def test_truncated_json(tmp_path):
    bad = tmp_path / "in" / "rank-1.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"traceEvents": [kernel("k", 1, 1)] * 5})[:-20])
    run = run_cli("ingest", bad, "-o", tmp_path / "out")
    _assert_clean_failure(tmp_path, run, str(bad), "invalid JSON", "truncated")


def test_not_json(tmp_path):
    bad = tmp_path / "in" / "rank-1.json"
    bad.parent.mkdir()
    bad.write_text("this is a CSV, honest\n1,2,3\n")
    run = run_cli("ingest", bad, "-o", tmp_path / "out")
    _assert_clean_failure(tmp_path, run, str(bad), "not a recognised profiler trace")


def test_empty_trace_events(tmp_path):
    bad = write_trace(tmp_path / "in" / "rank-1.json", [])
    run = run_cli("ingest", bad, "-o", tmp_path / "out")
    _assert_clean_failure(tmp_path, run, str(bad), "no events")


def test_mistyped_events_are_counted_not_fatal(tmp_path):
    events = [
        kernel("k", 1, 1),
        {"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": "x", "dur": 1},
        {"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": [1]},
    ]
    f = write_trace(tmp_path / "in" / "t.json", events)
    run = run_cli("ingest", f, "-o", tmp_path / "out", "--json")
    assert run.code == 0, run
    acc = json.loads(run.stdout)["accounting"]
    assert acc == {
        "read": 3,
        "kept": 1,
        "kept_by_table": {"events": 1},
        "rejected": {"bad_dur": 1, "bad_ts": 1},
        "files_unreadable": 0,  # no file skipped (ingest --skip-bad lists them)
    }


def test_duplicate_rank_across_files(tmp_path):
    a = _good(tmp_path, "a.json", rank=3)
    b = _good(tmp_path, "b.json", rank=3)
    run = run_cli("ingest", a, b, "-o", tmp_path / "out", "--jobs", "1")
    _assert_clean_failure(tmp_path, run, "rank 3 is also claimed by", "--rank-map")


def test_decompression_bomb_is_capped(tmp_path):
    bomb = tmp_path / "in" / "rank-0.json.gz"
    bomb.parent.mkdir()
    # 64 MiB of spaces inside a valid JSON document compresses to ~64 KiB
    payload = b'{"traceEvents": [' + b" " * (64 * 1024 * 1024) + b"]}"
    bomb.write_bytes(gzip.compress(payload, compresslevel=9))
    assert bomb.stat().st_size < 1024 * 1024
    run = run_cli("ingest", bomb, "-o", tmp_path / "out", "--max-size", "16M")
    _assert_clean_failure(tmp_path, run, str(bomb), "cap of 16.0 MiB", "--max-size")


def test_files_with_no_rank_say_how_to_give_one(tmp_path):
    # two sources, neither says its rank: which is which cannot be guessed
    f = write_trace(tmp_path / "in" / "trace.json", [kernel("k", 1, 1)], rank=None)
    g = write_trace(tmp_path / "in" / "other.json", [kernel("k", 1, 1)], rank=None)
    run = run_cli("ingest", f, g, "-o", tmp_path / "out")
    _assert_clean_failure(tmp_path, run, "cannot tell which rank", "--rank-from order", "--rank-map")


def test_a_single_source_with_no_rank_is_rank_0_and_says_so(tmp_path):
    f = write_trace(tmp_path / "in" / "trace.json", [kernel("k", 1, 1)], rank=None)
    run = run_cli("ingest", f, "-o", tmp_path / "out", "-j", "1")
    assert run.code == 0, run
    assert "it is rank 0 (rank_source single-file)" in run.stderr
    info = json.loads(run_cli("info", tmp_path / "out", "--json").stdout)
    assert [(r["rank"], r["rank_source"]) for r in info["ranks"]] == [(0, "single-file")]


def test_rank_from_order_and_rank_map_fix_it(tmp_path):
    a = write_trace(tmp_path / "in" / "x.json", [kernel("k", 1, 1)], rank=None)
    b = write_trace(tmp_path / "in" / "y.json", [kernel("k", 1, 1)], rank=None)
    run = run_cli("ingest", a, b, "-o", tmp_path / "o1", "--rank-from", "order", "--json")
    assert run.code == 0, run
    assert [
        (r["rank"], r["source_file"].endswith(f"{n}.json"))
        for r, n in zip(json.loads(run.stdout)["ranks"], "xy", strict=True)
    ] == [(0, True), (1, True)]
    mapping = tmp_path / "ranks.txt"
    mapping.write_text("x.json 5\ny.json = 2\n")
    run = run_cli("ingest", a, b, "-o", tmp_path / "o2", "--rank-map", mapping, "--json")
    assert run.code == 0, run
    got = {r["source_file"].rsplit("/", 1)[-1]: r["rank"] for r in json.loads(run.stdout)["ranks"]}
    assert got == {"x.json": 5, "y.json": 2}


@pytest.mark.parametrize("args", [["ingest", "missing.json", "-o", "out"], ["info", "no-store-here"]])
def test_missing_paths(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    run = run_cli(*args)
    assert run.code == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "no such" in run.stderr


def test_existing_output_needs_force(tmp_path):
    f = _good(tmp_path)
    assert run_cli("ingest", f, "-o", tmp_path / "out").code == 0
    run = run_cli("ingest", f, "-o", tmp_path / "out")
    assert run.code == 2 and "--force" in run.stderr
    assert run_cli("ingest", f, "-o", tmp_path / "out", "--force").code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]  # no temporary left behind


def test_skip_bad_skips_and_lists_a_file_whose_rank_cannot_be_told(tmp_path):
    """Issue 42: ``--skip-bad`` stopped at a file with no rank in its content or name; it must skip
    it, name it with the reason, and keep the others."""
    from tests.conftest import SAMPLES

    src = SAMPLES / "coupled" / "kineto"
    if not src.is_dir():
        pytest.skip(f"sample trace {src} is absent")
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "rank000.pt.trace.json.gz").write_bytes((src / "rank000.pt.trace.json.gz").read_bytes())
    trace = json.loads(gzip.decompress((src / "rank001.pt.trace.json.gz").read_bytes()))
    trace.pop("distributedInfo", None)
    (folder / "mystery.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(trace).encode()))
    strict = run_cli("ingest", str(folder), "-o", str(tmp_path / "a.store"))
    assert strict.code == 2 and "cannot tell which rank" in strict.stderr
    run = run_cli("ingest", str(folder), "-o", str(tmp_path / "b.store"), "--skip-bad")
    assert run.code == 0, run.stderr
    assert "skipped mystery.pt.trace.json.gz" in run.stderr and "cannot tell which rank" in run.stderr
    assert "1 rank," in run.text and "1 unreadable file left out" in run.text


def test_two_files_of_one_name_are_named_by_their_folders():
    from asaptrace.ingest.discovery import shown_names

    paths = ["/r/a/kernel_details.csv", "/r/b/kernel_details.csv", "/r/b/trace_view.json"]
    assert shown_names(paths) == {
        "/r/a/kernel_details.csv": "a/kernel_details.csv",
        "/r/b/kernel_details.csv": "b/kernel_details.csv",
        "/r/b/trace_view.json": "trace_view.json",
    }
