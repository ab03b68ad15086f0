"""TTFT split into queueing, kernel time and barrier wait, with lengths and arrivals from a sidecar."""

from __future__ import annotations

import json

import pytest

from asaptrace.analyze import barrier as bw
from asaptrace.analyze.breakdown import step_breakdown
from asaptrace.analyze.ttft import ttft_by_bucket, ttft_requests
from asaptrace.errors import UsageError
from asaptrace.pipeline import enrich_store
from tests._analysis_helpers import ingest, moe_scenario, write_traces

US = 1000


def _sidecar(path):
    lines = [
        {"step": 0, "dp_group": 0, "seq_len": 1000, "request_id": "a", "arrival_ns": -1000 * US},
        {"step": 0, "dp_group": 0, "seq_len": 1000, "request_id": "b", "arrival_ns": -500 * US},
        {"step": 0, "dp_group": 1, "seq_lens": [2000], "request_ids": ["c"]},
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_ttft_split_per_request_and_bucket(tmp_path):
    raw = ingest(write_traces(tmp_path / "t", moe_scenario(annotations=False)), tmp_path / "s")
    # no annotations: the DP groups come from --parallel, the lengths and arrivals from --batches
    store = enrich_store(raw, batches=_sidecar(tmp_path / "batches.jsonl"), parallel="dp=2,tp=2,ep=4")
    assert store.meta["batches_source"] == "sidecar:batches.jsonl"
    assert store.read("ranks").sort("rank").get_column("dp_group").to_list() == [0, 0, 1, 1]
    barrier = bw.barrier_wait(store.events(), store.ranks())
    bd = step_breakdown(store.events(), store.ranks(), barrier=barrier)
    req = ttft_requests(store.scan("batches"), breakdown=bd).sort("request_id")
    a = req.row(0, named=True)
    # group 0: step window 0..850 µs, exposed wait 480 µs on both ranks; request a arrived at −1000 µs
    assert (a["queue_ns"], a["wait_ns"], a["kernel_ns"], a["ttft_ns"]) == (
        1000 * US,
        480 * US,
        370 * US,
        1850 * US,
    )
    c = req.row(2, named=True)
    # group 1: exposed waits 80 and 40 µs → 60; no arrival known → no queueing, no TTFT
    assert (c["wait_ns"], c["kernel_ns"], c["queue_ns"], c["ttft_ns"]) == (60 * US, 790 * US, None, None)
    by = ttft_by_bucket(req)
    assert by.get_column("bucket").to_list() == ["<1K", "1K-4K"]
    small = by.row(0, named=True)
    assert small["n_requests"] == 2 and small["mean_ttft_ns"] == 1600 * US  # (1850 + 1350) / 2
    assert small["wait_share"] == pytest.approx(480 / 850)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"step": 0, "dp_group": 0}', "needs 'seq_len'"),
        ('{"step": "x", "dp_group": 0, "seq_len": 5}', "'step' must be an integer"),
        ('{"step": 0, "dp_group": 0, "seq_lens": [1, 2], "request_ids": ["a"]}', "as many items"),
        ("not json", "line 1: not JSON"),
    ],
)
def test_bad_sidecar_is_a_one_line_error(tmp_path, line, message):
    path = tmp_path / "b.jsonl"
    path.write_text(line + "\n")
    raw = ingest(write_traces(tmp_path / "t", moe_scenario()), tmp_path / "s")
    with pytest.raises(UsageError, match=message) as info:
        enrich_store(raw, tmp_path / "out", batches=path)
    assert str(path) in str(info.value)


def test_batch_lines_carry_arrivals_as_a_list(tmp_path):
    from asaptrace.enrich.batches import read_batches_sidecar

    path = tmp_path / "b.jsonl"
    line = {"step": 1, "dp_group": 0, "seq_lens": [10, 20], "request_ids": ["x", "y"], "arrivals_ns": [5, 7]}
    path.write_text(json.dumps(line) + "\n")
    got = read_batches_sidecar(path).sort("request_id")
    assert got.get_column("arrival_ns").to_list() == [5, 7]


@pytest.mark.parametrize(
    ("arrivals", "message"),
    [
        ([5], "must be lists of as many items as 'seq_lens'"),
        (["5", 7], "'arrivals_ns' must be a list of integers"),
        ([2**64, 7], "'arrivals_ns' must be a list of integers"),  # beyond int64: no overflow inside
        ("5,7", "must be lists of as many items"),
    ],
)
def test_bad_arrivals_are_one_line_naming_the_file(tmp_path, arrivals, message):
    from asaptrace.enrich.batches import read_batches_sidecar

    path = tmp_path / "b.jsonl"
    path.write_text(
        json.dumps({"step": 1, "dp_group": 0, "seq_lens": [10, 20], "arrivals_ns": arrivals}) + "\n"
    )
    with pytest.raises(UsageError, match=message) as err:
        read_batches_sidecar(path)
    assert str(err.value).startswith(f"{path}: line 1:")
