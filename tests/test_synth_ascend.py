"""The Ascend writer mimics the real torch_npu trace_view.json structure."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from asaptrace.synth import synthesize
from asaptrace.synth.ascend_writer import merge_intervals, subtract_intervals
from tests._synth_helpers import ASCEND_SAMPLE, need, read_json_gz, tiny


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("asc") / "run"
    synthesize(tiny("coupled-ascend", run={"steps": 1}), out)
    files = sorted((out / "ascend").glob("*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json.gz"))
    return out, files, read_json_gz(files[1])


def _process_names(events: list[dict]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}


def test_folders_are_named_like_vllm_ascend_and_the_top_level_is_a_list(written):
    _, files, events = written
    assert [f.parents[1].name for f in files] == [
        "dp0_pp0_tp0_ep0_rank0_ascend_pt",
        "dp0_pp0_tp1_ep1_rank1_ascend_pt",
        "dp1_pp0_tp0_ep2_rank2_ascend_pt",
        "dp1_pp0_tp1_ep3_rank3_ascend_pt",
    ]
    assert isinstance(events, list)
    assert all(isinstance(e["ts"], str) for e in events if "ts" in e)  # µs as decimal strings
    assert all(isinstance(e["dur"], float | int) for e in events if "dur" in e)


def test_processes_and_records_have_the_real_sample_shape(written):
    real = json.loads(need(ASCEND_SAMPLE).read_text())
    _, _, ours = written
    real_names = set(_process_names(real).values())
    assert real_names <= set(_process_names(ours).values())  # Python, CANN, Ascend Hardware, Overlap Analysis
    assert "Communication" in _process_names(ours).values()

    def keys_by_kind(events):
        names = _process_names(events)
        out = defaultdict(set)
        for e in events:
            kind = (e["ph"], e.get("cat"), names.get(e["pid"]) if e["ph"] != "M" else e["name"])
            out[kind].add(tuple(sorted(e)))
            if e["ph"] == "X" and names.get(e["pid"]) == "Ascend Hardware":
                out["hw-args"].add(tuple(sorted(e["args"])))
        return out

    r, o = keys_by_kind(real), keys_by_kind(ours)
    for kind in [
        ("X", "cpu_op", "Python"),
        ("X", None, "Ascend Hardware"),
        ("X", None, "CANN"),
        ("X", None, "Overlap Analysis"),
        ("s", "async_npu", "Python"),
        ("f", "async_npu", "Ascend Hardware"),
        ("M", None, "process_name"),
        ("M", None, "thread_name"),
        ("M", None, "process_labels"),
        "hw-args",
    ]:
        assert o[kind] and o[kind] <= r[kind], f"{kind}: ours {o[kind]} vs real {r[kind]}"


def test_fused_moe_and_hccl_names_and_annotations(written):
    _, _, events = written
    names = _process_names(events)
    hw = {e["name"] for e in events if e["ph"] == "X" and names.get(e["pid"]) == "Ascend Hardware"}
    assert {
        "FusedInferAttentionScore",
        "MoeDistributeDispatchV2",
        "MoeDistributeCombineV2",
        "GroupedMatmul",
    } <= hw
    comm = [e for e in events if e["ph"] == "X" and names.get(e["pid"]) == "Communication"]
    assert any(e["name"].startswith("hcom_allGather_") for e in comm)
    spans = [e for e in events if e.get("cat") == "user_annotation"]
    layer = [e for e in spans if e["name"].startswith("layer#")]
    step = [e for e in spans if e["name"].startswith("prefill_step#")]
    assert step and set(step[0]["args"]) == {
        "step",
        "dp_group",
        "seq_lens",
        "cached_lens",
        "request_ids",
        "arrivals_ns",
    }
    assert layer and set(layer[0]["args"]) == {"step", "layer", "micro_batch"}


def test_every_device_task_has_its_torch_to_npu_arrow(written):
    _, _, events = written
    names = _process_names(events)
    tasks = [e for e in events if e["ph"] == "X" and names.get(e["pid"]) == "Ascend Hardware"]
    ends = {(e["pid"], e["tid"], e["ts"]) for e in events if e["ph"] == "f"}
    starts = {e["id"] for e in events if e["ph"] == "s"}
    assert all((t["pid"], t["tid"], t["ts"]) in ends for t in tasks)
    assert len(starts) == len(tasks)


def test_interval_helpers_of_the_overlap_rows():
    # compute [0,10) ∪ [5,12) ∪ [20,25) → [0,12) [20,25); comm [8,22) minus compute → [12,20)
    comp = merge_intervals([(5, 12), (0, 10), (20, 25)])
    assert comp == [(0, 12), (20, 25)]
    assert subtract_intervals([(8, 22)], comp) == [(12, 20)]
    assert subtract_intervals([(0, 3), (30, 40)], comp) == [(30, 40)]
