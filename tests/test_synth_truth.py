"""truth.json agrees with the written events; the coupled traces show what DOMAIN.md describes."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest

from asaptrace.synth import synthesize
from tests._synth_helpers import SAMPLES, kineto_kernels, ns, read_json_gz, tiny


@pytest.fixture(scope="module")
def coupled_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "coupled"
    cfg = tiny("coupled", clock={"per": "rank", "offset_max_us": 5000.0}, run={"steps": 2, "seed": 5})
    synthesize(cfg, out)
    truth = json.loads((out / "truth.json").read_text())
    traces = {r: read_json_gz(out / "kineto" / f"rank{r:03d}.pt.trace.json.gz") for r in range(4)}
    return truth, traces


def _true_kernels(trace: dict, epoch: int, offset: int) -> dict[tuple[str, int], int]:
    """(kernel family, start on the true clock) → duration ns, from one rank's written events."""
    base = trace["baseTimeNanoseconds"]
    out = {}
    for k in kineto_kernels(trace):
        family = "notify" if "notify_dispatch" in k["name"] else k["name"].split("<")[0].split("::")[-1]
        out[(family, ns(k["ts"]) + base - epoch - offset)] = ns(k["dur"])
    return out


def test_written_comm_kernels_minus_clock_offset_reproduce_truth_waits(coupled_run):
    truth, traces = coupled_run
    epoch, offsets = truth["epoch_ns"], truth["clock_offsets_ns"]
    assert len(set(offsets)) == 4 and offsets[0] == 0  # per-rank clocks this time, rank 0 the reference
    kernels = {r: _true_kernels(traces[r], epoch, offsets[r]) for r in traces}
    w = truth["waits"]
    inst: dict[tuple, list[tuple[int, int, int]]] = defaultdict(list)  # instance → (rank, arrival, wait)
    for i in range(len(w["rank"])):
        key = (w["step"][i], w["layer"][i], w["micro_batch"][i], w["op"][i])
        inst[key].append((w["rank"][i], w["arrival_ns"][i], w["wait_ns"][i]))
    family = {
        "dispatch": "notify",
        "combine": "combine",
        "allgather": "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    }
    checked = 0
    for (_step, _layer, _mb, op), rows in inst.items():
        durs = {r: kernels[r][(family[op], arrival)] for r, arrival, _ in rows}  # KeyError = no such kernel
        ends = {arrival + durs[r] for r, arrival, _ in rows}
        assert len(ends) == 1, "a collective ends at the same true time on every rank"
        latest = max(arrival for _, arrival, _ in rows)
        shortest = min(durs.values())
        for r, arrival, wait in rows:
            assert wait == latest - arrival  # the wait is the time to the last peer's arrival …
            assert durs[r] - shortest == wait  # … and it hides inside the comm kernel
        checked += 1
    # 2 steps × (4 MoE layers × 2 micro-batches × {dispatch, combine} + 1 all-gather)
    assert checked == 2 * (4 * 2 * 2 + 1)


def test_step_annotations_carry_the_truth_batch_composition(coupled_run):
    truth, traces = coupled_run
    b = truth["batches"]
    for r, trace in traces.items():
        group = r // 2
        steps = [
            e
            for e in trace["traceEvents"]
            if e.get("cat") == "user_annotation" and e["name"].startswith("prefill_step#")
        ]
        assert len(steps) == 2
        for e in steps:
            s = e["args"]["step"]
            rows = [i for i in range(len(b["step"])) if b["step"][i] == s and b["dp_group"][i] == group]
            rows.sort(key=lambda i: b["request_id"][i])
            assert e["args"]["dp_group"] == group
            assert e["args"]["request_ids"] == [b["request_id"][i] for i in rows]
            assert e["args"]["seq_lens"] == [b["seq_len"][i] for i in rows]
            assert e["args"]["cached_lens"] == [b["cached_len"][i] for i in rows]


def test_every_kernel_has_a_launch_with_its_correlation_and_a_flow(coupled_run):
    _, traces = coupled_run
    for trace in traces.values():
        ev = trace["traceEvents"]
        launches = {e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"}
        kernels = [e for e in ev if e.get("cat") == "kernel"]
        flows = {(e["ph"], e["id"]) for e in ev if e.get("cat") == "ac2g"}
        assert {k["args"]["correlation"] for k in kernels} == launches
        assert all(
            ("s", k["args"]["correlation"]) in flows and ("f", k["args"]["correlation"]) in flows
            for k in kernels
        )
        assert all(
            k["pid"] == trace["distributedInfo"]["rank"] % 2 for k in kernels
        )  # 2 devices per node here


def test_sum_sq_spread_drives_the_per_layer_wait_in_the_coupled_sample():
    # token-balanced groups (≤ 2 % apart) differ in Σs²; the group with the cheapest attention waits
    # longest at every dispatch barrier: the mean wait of a group tracks (max − own) attention time
    truth = json.loads((SAMPLES / "coupled" / "truth.json").read_text())
    w = truth["waits"]
    for st in truth["steps"]:
        assert st["token_imbalance"] < 1.02
        assert st["sum_sq_imbalance"] > 1.5
        attn = np.array(st["group_attention_ms_per_layer"])
        waits = defaultdict(list)
        for i in range(len(w["rank"])):
            if w["step"][i] == st["step"] and w["op"][i] == "dispatch" and w["layer"][i] > 3:
                waits[w["rank"][i] // 4].append(w["wait_ns"][i])
        mean_wait = np.array([np.mean(waits[g]) for g in range(8)])
        assert np.corrcoef(mean_wait, attn.max() - attn)[0, 1] > 0.95
        assert int(np.argmin(mean_wait)) == int(np.argmax(st["group_sum_sq"]))


def test_hot_expert_and_slow_device_are_the_stragglers_of_the_hot_expert_sample():
    truth = json.loads((SAMPLES / "coupled-hot-expert" / "truth.json").read_text())
    s = truth["straggler"]
    assert (s["hot_expert"], s["hot_expert_rank"], s["slow_rank"]) == (77, 9, 22)  # expert 77 of 8 per rank
    loads = np.array(truth["expert_loads"]["assignments"])
    assert (loads.argmax(axis=1) == 9).all()  # rank 9 receives the most tokens in every MoE layer
    w = truth["waits"]
    last = defaultdict(lambda: defaultdict(int))  # op → rank → instances where it arrived last
    inst = defaultdict(list)
    for i in range(len(w["rank"])):
        inst[(w["step"][i], w["layer"][i], w["micro_batch"][i], w["op"][i])].append(
            (w["wait_ns"][i], w["rank"][i])
        )
    for (_, _, _, op), rows in inst.items():
        last[op][min(rows)[1]] += 1
    assert set(last["combine"]) == {9}  # the hot expert's rank is last into every combine
    assert (
        max(last["dispatch"], key=last["dispatch"].get) == 22
    )  # the slow device most often last to dispatch


def test_clock_offsets_are_per_node_by_default_with_rank_zero_the_reference():
    truth = json.loads((SAMPLES / "coupled" / "truth.json").read_text())
    offs = truth["clock_offsets_ns"]
    assert offs[:8] == [0] * 8
    for node in range(4):
        assert len(set(offs[node * 8 : node * 8 + 8])) == 1
    assert len(set(offs)) == 4


def test_disaggregated_experts_serve_work_in_arrival_order_and_groups_never_wait_for_each_other(tmp_path):
    cfg = tiny("disaggregated", run={"steps": 2})
    out = tmp_path / "d"
    synthesize(cfg, out)
    truth = json.loads((out / "truth.json").read_text())
    it = truth["expert_items"]
    avail = np.array(it["available_ns"])
    starts = np.array(it["start_ns"])  # (items, expert devices): receive start
    ends = np.array(it["end_ns"])
    assert (starts >= avail[:, None]).all()  # nothing is received before it was sent
    for e in range(starts.shape[1]):  # each MoE device takes items first come, first served
        order = np.lexsort((np.arange(len(avail)), avail))
        assert (np.diff(starts[order, e]) >= 0).all()
    assert (np.array(it["result_ns"]) > ends.max(axis=1)).all()
    # items of different groups and layers interleave on the MoE devices
    assert len(set(it["group"][:8])) > 1
    # each group's combine-receive is released by its own result, never by another group
    result = {
        (g, s, L, b): r
        for g, s, L, b, r in zip(
            it["group"], it["step"], it["layer"], it["micro_batch"], it["result_ns"], strict=True
        )
    }
    w = truth["waits"]
    for i in range(len(w["rank"])):
        g = w["rank"][i] // 2
        expect = max(w["arrival_ns"][i], result[(g, w["step"][i], w["layer"][i], w["micro_batch"][i])])
        assert w["release_ns"][i] == expect
    ends_by_group = [st["end_ns"] for st in truth["steps"] if st["step"] == 1]
    assert len(set(ends_by_group)) == len(ends_by_group)  # no cross-group barrier: groups finish apart
