"""Phases and batches from what the trace says: serving step annotations, training markers, steps
as the trace defines them, gap cuts as the last resort (asaptrace.enrich.phases, segment)."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

from asaptrace.enrich.phases import _keep_sumsq, read_step_name
from asaptrace.enrich.taxonomy import PROFILES, Taxonomy, select_taxonomy
from asaptrace.info import not_prefill_reason, steps_of, steps_text
from asaptrace.pipeline import build_store, enrich_store
from tests._analysis_helpers import GEMM, HOST_PID, RankTrace, ingest, write_traces

US = 1000
#: ../shared/data beside the checkout (ASAPTRACE_SHARED_DATA overrides it, e.g. from a worktree)
TRACES = (
    Path(os.environ.get("ASAPTRACE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
    / "traces"
)
ALL = Taxonomy(tuple(p for _, p in PROFILES))


# ------------------------------------------------------------------------------------ the rules alone
def test_sglang_step_annotation_names_prefill_batch():
    got = read_step_name("step[EXTEND bs=15 toks=15360]", ALL)
    assert got is not None
    assert (got["name_phase"], got["requests"], got["tokens"]) == ("prefill", 15, 15360)
    assert read_step_name("step[DECODE bs=32 toks=32]", ALL)["name_phase"] == "decode"
    assert read_step_name("step[MIXED bs=8 toks=2100]", ALL)["name_phase"] == "mixed"


def test_vllm_new_and_old_step_annotations():
    new = read_step_name(
        "execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)",
        ALL,
    )
    assert new is not None
    # 9 prefill requests and 37 decode requests in one step: mixed, 46 requests, 8155 + 37 tokens
    assert (new["name_phase"], new["requests"], new["tokens"]) == ("mixed", 46, 8192)
    assert (new["prefill_context"], new["prefill_sumsq"], new["decode_context"]) == (8430, 7475785, 34489)
    old = read_step_name("execute_context_2(4096)_generation_0(0)", ALL)
    assert (old["name_phase"], old["requests"], old["tokens"]) == ("prefill", 2, 4096)
    assert read_step_name("execute_context_0(0)_generation_30(30)", ALL)["name_phase"] == "decode"


def test_derived_lengths_keep_the_sum_and_the_sum_of_squares():
    # n = 3, S = 12, Q = 72: (n-1)a + b = 12 and 2a² + b² = 72 → a = (24 - √(2·(3·72 - 144)))/6 = 2,
    # b = 8: lengths 2, 2, 8 (equal lengths 4, 4, 4 would give Σs² = 48, a third less attention)
    assert _keep_sumsq(12, 3, 72) == [2, 2, 8]
    assert _keep_sumsq(12, 3, None) == [4, 4, 4]
    assert _keep_sumsq(13, 3, None) == [5, 4, 4]


def test_steps_text_names_the_phase():
    meta = {"segmentation": {"steps": [{"step": 0, "phase": "training"}]}}
    assert steps_text(meta) == "1 training step"
    meta = {
        "segmentation": {
            "steps": [
                {"step": 0, "phase": "prefill"},
                {"step": 1, "phase": "decode"},
                {"step": 2, "phase": "decode"},
            ]
        }
    }
    assert steps_text(meta) == "1 prefill step and 2 decode steps"
    assert not_prefill_reason(meta) is None
    meta = {"segmentation": {"steps": [{"step": 0, "phase": "unknown"}, {"step": 1, "phase": "unknown"}]}}
    assert steps_text(meta) == "2 steps"  # never "prefill steps" when the trace does not say
    assert "no prefill to replay (1 training step)" in not_prefill_reason(
        {"segmentation": {"steps": [{"step": 0, "phase": "training"}]}}
    )


# ------------------------------------------------------------------------------ small traces, ingested
def _one_rank(tmp_path: Path, trace: RankTrace):
    return enrich_store(ingest(write_traces(tmp_path / "t", [trace]), tmp_path / "s"))


def _device(store) -> pl.DataFrame:
    return store.read("events").filter(pl.col("is_device") & (pl.col("kind").cast(pl.String) != "annotation"))


def test_sglang_step_nested_in_an_execute_span_is_one_prefill_step_with_its_batch(tmp_path):
    t = RankTrace(rank=0, world=1)
    # execute_… (0-1000 µs) holds SGLang's step[EXTEND …] (500-900 µs); one kernel is launched
    # before the EXTEND span, three inside it, the last one running after both spans end
    t.annotation("execute_10_context_2(sq10sk10sqsq58sqsk58)_generation_0(sq0sk0sqsq0sqsk0)", 0, 1000)
    t.annotation("step[EXTEND bs=2 toks=10]", 500, 400)
    t.kernel(GEMM, 100, 10, launch_at=50)
    for i in range(3):
        t.kernel(GEMM, 600 + 200 * i, 150, launch_at=550 + 10 * i)
    store = _one_rank(tmp_path, t)
    dev = _device(store)
    assert dev.get_column("step").to_list() == [0, 0, 0, 0]  # one step, the kernel after the spans too
    steps = steps_of(store.meta)
    assert steps.select("step", "phase", "requests", "new_tokens").rows() == [(0, "prefill", 2, 10)]
    # the batch: 2 requests, Σs = 10, Σs² = 58 → lengths 3 and 7 (9 + 49 = 58), derived from the totals
    b = store.read("batches")
    assert sorted(b.get_column("seq_len").to_list()) == [3, 7]
    assert "derived" in store.meta["batches_source"]


def test_backward_on_another_thread_and_an_overhanging_kernel_are_one_training_step(tmp_path):
    t = RankTrace(rank=0, world=1)
    t.annotation("ProfilerStep#7", 0, 100)  # main thread, 0-100 µs
    t.kernel(GEMM, 10, 20, launch_at=5)  # forward, inside the step
    # the autograd engine's thread (tid 99) runs the backward: its launch at 90 µs is inside the
    # step's time but not inside its thread's spans; the kernel runs 120-150 µs, after the step ends
    t.events.append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "autograd::engine::evaluate_function: AddmmBackward0",
            "pid": HOST_PID,
            "tid": 99,
            "ts": 85,
            "dur": 10,
            "args": {},
        }
    )
    t.events.append(
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": HOST_PID, "tid": 99,
         "ts": 90, "dur": 1, "args": {"correlation": 500}}
    )  # fmt: skip
    t.events.append(
        {"ph": "X", "cat": "kernel", "name": GEMM, "pid": 0, "tid": 7, "ts": 120, "dur": 30,
         "args": {"stream": 7, "correlation": 500}}
    )  # fmt: skip
    store = _one_rank(tmp_path, t)
    dev = _device(store)
    # both kernels in step 7 (none outside a step), and the step is training (the backward marker)
    assert dev.get_column("step").to_list() == [7, 7]
    assert steps_of(store.meta).select("step", "phase").rows() == [(7, "training")]


def test_a_gap_cut_step_shorter_than_the_longest_kernel_is_merged(tmp_path):
    t = RankTrace(rank=0, world=1)
    # a lone 4 µs kernel, 5 ms idle, ten 1 ms kernels 10 µs apart, 5 ms idle, ten more. Gaps: 5 ms
    # twice, 10 µs eighteen times → threshold max(1 ms, 20 × 10 µs) = 1 ms → cuts before 5,004 µs
    # and 20,094 µs. The first "step" (4 µs) is shorter than the longest kernel (1 ms): it joins
    # the next, so two steps of ≈ 10 ms, not three.
    t.kernel(GEMM, 0, 4)
    start = 5_004
    for _ in range(2):
        for i in range(10):
            t.kernel(GEMM, start + i * 1_010, 1_000)
        start += 10 * 1_010 - 10 + 5_000
    store = _one_rank(tmp_path, t)
    dev = _device(store).sort("ts_ns")
    assert dev.get_column("step").to_list() == [0] * 11 + [1] * 10
    assert store.meta["segmentation"]["step_source"] == "gaps"
    assert any("2 steps found from idle gaps" in n for n in store.meta["segmentation"]["notes"])
    assert steps_of(store.meta).get_column("phase").to_list() == ["unknown", "unknown"]


def test_moe_annotation_makes_the_kernels_launched_inside_it_moe(tmp_path):
    t = RankTrace(rank=0, world=1)
    t.annotation("MoE[experts=64, tokens=16, topk=2]", 0, 100)
    t.kernel("void topk_softmax_kernel<float>(float*)", 10, 5, launch_at=5)
    t.kernel("void at::native::elementwise_kernel<128, 4>(int)", 20, 5, launch_at=15)
    t.kernel("void at::native::elementwise_kernel<128, 4>(int)", 200, 5, launch_at=150)  # outside
    store = _one_rank(tmp_path, t)
    dev = _device(store).sort("ts_ns")
    assert dev.get_column("kind").cast(pl.String).to_list() == ["gate", "moe", "compute"]
    assert "moe_modules" in store.meta["taxonomy_profile"]
    assert select_taxonomy(["void at::native::elementwise_kernel"]).label == "common"  # not selected alone


# ---------------------------------------------------------------------------------------- real traces
def _real(tmp_path: Path, *parts: str):
    path = TRACES.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent (real traces live in ../shared/data)")
    return build_store([path], tmp_path / "s")


def test_sglang_real_trace_one_extend_step_of_15_requests(tmp_path):
    store = _real(tmp_path, "tracelens-serving", "sglang_Qwen3-8B_prefilldecode.json.gz")
    steps = steps_of(store.meta)
    assert steps.select("phase", "requests", "new_tokens").rows() == [("prefill", 15, 15360)]
    b = store.read("batches")
    assert (b.height, b.get_column("seq_len").sum()) == (15, 15360)
    # every kernel is in that step (those running after the annotation ended were launched in it)
    assert _device(store).get_column("step").unique().to_list() == [0]


def test_vllm_real_trace_steps_from_the_new_annotation_form(tmp_path):
    store = _real(tmp_path, "tracelens-serving", "vllm_prefilldecode_piecewise_graph_execution.json.gz")
    steps = steps_of(store.meta)
    assert steps.select("phase", "requests", "new_tokens", "source").rows() == [
        ("mixed", 46, 8192, "annotation:vllm")
    ]
    # new tokens = seq_len − cached_len (the context, sk − sq, is the cached prefix): 8,155 + 37
    b = store.read("batches")
    new = (b.get_column("seq_len") - b.get_column("cached_len").fill_null(0)).sum()
    assert (b.height, new) == (46, 8155 + 37)
    assert b.get_column("cached_len").sum() == (8430 - 8155) + (34489 - 37)


@pytest.mark.parametrize(
    ("parts", "n_steps"),
    [(("kineto-dlrm-8rank",), 1), (("kineto-hta-samples", "nccl_data.json.gz"), 3)],
)
def test_real_training_traces_are_training(tmp_path, parts, n_steps):
    store = _real(tmp_path, *parts)
    steps = steps_of(store.meta)
    assert steps.get_column("phase").to_list() == ["training"] * n_steps
    assert _device(store).get_column("step").null_count() == 0  # no work outside the ProfilerSteps


def test_no_step_is_shorter_than_its_rank_longest_kernel_on_real_traces(tmp_path):
    store = _real(tmp_path, "tracelens-serving", "sglang_Qwen3-8B_prefilldecode.json.gz")
    per = (
        _device(store)
        .group_by("rank", "step")
        .agg(((pl.col("ts_ns") + pl.col("dur_ns")).max() - pl.col("ts_ns").min()).alias("span"))
        .join(_device(store).group_by("rank").agg(pl.col("dur_ns").max().alias("longest")), on="rank")
    )
    assert per.filter(pl.col("span") < pl.col("longest")).height == 0


def test_the_replay_takes_only_the_prefill_steps_and_says_what_it_left_out(tmp_path):
    from asaptrace.errors import UsageError
    from asaptrace.replay.whatif.measured import extract_measured_work

    # SGLang serving: one EXTEND step (0-1000 µs) then two DECODE steps; the what-ifs model prefill
    t = RankTrace(rank=0, world=1)
    t.annotation("step[EXTEND bs=2 toks=10]", 0, 1000)
    t.kernel(GEMM, 100, 500, launch_at=50)
    for i in range(2):
        t.annotation("step[DECODE bs=2 toks=2]", 2000 + 1000 * i, 500)
        t.kernel(GEMM, 2100 + 1000 * i, 100, launch_at=2050 + 1000 * i)
    store = _one_rank(tmp_path, t)
    assert steps_of(store.meta).get_column("phase").to_list() == ["prefill", "decode", "decode"]
    wl = extract_measured_work(store)
    assert wl.steps.get_column("step").to_list() == [0]  # the prefill step alone
    assert wl.steps.get_column("measured_ns").to_list() == [500 * US]  # its kernel, 100-600 µs
    assert set(wl.batches.get_column("step").to_list()) == {0}
    assert any("2 decode steps left out" in n for n in wl.notes)

    # decode only: nothing to replay, said in one line
    d = RankTrace(rank=0, world=1)
    d.annotation("step[DECODE bs=2 toks=2]", 0, 500)
    d.kernel(GEMM, 100, 100, launch_at=50)
    only_decode = _one_rank(tmp_path / "d", d)
    with pytest.raises(UsageError, match=r"no prefill to replay \(1 decode step\)"):
        extract_measured_work(only_decode)
