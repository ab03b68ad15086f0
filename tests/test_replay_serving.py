"""Serving schedulers on hand-worked cases: M/D/1, a two-group lockstep step, chunks, dual-batch."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest

from asaptrace.replay.policies import policy_of
from asaptrace.replay.policies.settings import apply_settings
from asaptrace.replay.serving.scenario import Scenario, is_knob, load_scenario
from asaptrace.replay.whatif.simulate import ServingRequests
from asaptrace.replay.whatif.simulate import simulate as serve

MS = 1_000_000

# Every cost zero unless a test sets it. Token counts are multiples of 1K = 1,024 tokens (DOMAIN
# §3), so "1 ms per 1K" of 4096 tokens is 4 ms. The attention constants hold for a TP group of
# attn_tp_ref dies (4 in the shipped scenario; a group of T dies pays × attn_tp_ref / T): the
# Default tests on one-die groups (default_tp=1) set attn_tp_ref=1 so the constants are theirs.
ZERO = {
    "attn_c0_ms": 0,
    "attn_c1_ms": 0,
    "attn_c2_ms": 0,
    "moe_plateau_ms": 0,
    "moe_a_ms": 0,
    "moe_b_ms": 0,
    "moe_e_ref": 0,
    "xfer_latency_ms": 0,
    "xfer_per_k_ms": 0,
}


@dataclass(frozen=True)
class Setup:
    """A scenario (layers, costs) and the policy settings these cases serve with (``asap_dp=1``,
    ``default_tp=1``: the old scenario names, routed to each policy's own fields)."""

    sc: Scenario
    settings: tuple = ()

    def with_knobs(self, values: dict) -> Setup:
        knobs = {k: v for k, v in values.items() if is_knob(k)}
        rest = tuple((k, v) for k, v in values.items() if not is_knob(k))
        return Setup(self.sc.with_knobs(knobs), self.settings + rest)

    def __getattr__(self, name):
        return getattr(self.sc, name)


def scenario(**knobs):
    return Setup(load_scenario("asap-paper")).with_knobs(ZERO | knobs)


def simulate(spec: str, req, setup: Setup | Scenario):
    """The registry's policy ``spec`` with the case's settings, served on its scenario."""
    setup = setup if isinstance(setup, Setup) else Setup(setup)
    res = serve(apply_settings(policy_of(spec), setup.settings), req, setup.sc)
    return replace(res, policy=spec)


def requests(arrival_ms, tokens, cached=None):
    n = len(tokens)
    return ServingRequests(
        np.array([round(a * MS) for a in arrival_ms], np.int64),
        np.array(tokens, np.int64),
        np.zeros(n, np.int64) if cached is None else np.array(cached, np.int64),
    )


def test_md1_queue_matches_the_closed_form():
    # One ASAP group, one slot, every batch a single request (min batch 1 token), a fixed
    # service D = 100 ms (attention c0 only, one layer; MoE and transfers free), Poisson
    # arrivals at λ = 5/s: an M/D/1 queue with ρ = λD = 0.5. Mean wait in queue
    # W_q = ρ·D / (2(1 − ρ)) = 0.5·100 / (2·0.5) = 50 ms, so mean TTFT = W_q + D = 150 ms.
    sc = scenario(layers=1, attn_c0_ms=100, asap_dp=1, asap_min_batch_tokens=1, asap_alone_tokens=10**9)
    rng = np.random.default_rng(7)
    n = 60_000
    arrival = np.cumsum(rng.exponential(1e9 / 5, n)).astype(np.int64)
    req = ServingRequests(arrival, np.full(n, 1000, np.int64), np.zeros(n, np.int64))
    res = simulate("asap-no-dual-batch", req, sc)
    mean_ttft_ms = res.ttft_ns.mean() / MS
    # the standard error of an M/D/1 mean wait over 60k customers at ρ = 0.5 is well under 1 ms
    assert abs(mean_ttft_ms - 150.0) < 3.0
    assert abs(res.queue_ns.mean() / MS - 50.0) < 3.0
    assert (res.own_ns == 100 * MS).all()  # own kernel time is the service itself
    assert (res.sync_ns == 0).all()  # nobody shares a batch, nothing to wait for


def test_two_group_lockstep_step_by_hand():
    # Default, two groups of one die (dp=2, tp=1), two layers. Costs per layer: attention
    # 1 ms per 1K tokens, MoE 1 ms per 1K tokens of the step (E_ref = 0: no scaling), dispatch
    # and combine 0.5 ms latency each, times k_s = 2 → 1 ms each (attn_tp_ref = 1: TP1 constants).
    # t=0: requests A (4096 tokens = 4K) and B (1024 = 1K) arrive; longest-first A → group 0,
    #   B → group 1.
    #   layer = max(4, 1) attention + 1 dispatch + MoE(5K) 5 + 1 combine = 11 ms; step = 22 ms.
    #   own(A) per layer = 4 + (1 + 1)·4096/4096 + 5·4096/5120 = 10 → 20 ms, sync = 2 (B's MoE share)
    #   own(B) per layer = 1 + 2·1024/1024 + 5·1024/5120 = 4 → 8 ms, sync = 14 (barrier + A's work)
    # t=1 ms: C (2048 = 2K) arrives, waits for the step to end at 22 ms, runs alone on group 0:
    #   layer = 2 + 1 + 2 + 1 = 6, step 12 ms, ends at 34: TTFT 33 = queue 21 + own 12 + sync 0.
    sc = scenario(
        layers=2,
        default_dp=2,
        default_tp=1,
        attn_tp_ref=1,
        attn_c1_ms=1.0,
        moe_b_ms=1.0,
        xfer_latency_ms=0.5,
        coupled_k_s=2.0,
    )
    res = simulate("default", requests([0, 0, 1], [4096, 1024, 2048]), sc)
    assert (res.ttft_ns // MS).tolist() == [22, 22, 33]
    assert (res.own_ns // MS).tolist() == [20, 8, 12]
    assert (res.sync_ns // MS).tolist() == [2, 14, 0]
    assert (res.queue_ns // MS).tolist() == [0, 0, 21]
    assert res.steps == 2


def test_arrival_routing_sends_each_request_to_the_group_with_fewest_outstanding_tokens():
    # Same costs as above, one layer, attention only (1 ms per 1K). Arrival routing:
    # A (4096) at 0 → group 0; the step starts at once with A alone: 4 ms.
    # B (1024) at 1 → group 1 (0 outstanding vs 4096); C (1024) at 2 → group 1 (1024 < 4096).
    # Step 2 at t=4: group 0 empty, group 1 holds B and C → 2 ms, both end at 6.
    sc = scenario(
        layers=1, default_dp=2, default_tp=1, attn_tp_ref=1, attn_c1_ms=1.0, default_routing="arrival"
    )
    res = simulate("default", requests([0, 1, 2], [4096, 1024, 1024]), sc)
    assert (res.end_ns // MS).tolist() == [4, 6, 6]
    # with step routing B and C would be split over the two groups: 1 ms, ending at 5
    res_step = simulate(
        "default", requests([0, 1, 2], [4096, 1024, 1024]), sc.with_knobs({"routing": "step"})
    )
    assert (res_step.end_ns // MS).tolist() == [4, 5, 5]


def test_chunked_prompt_pays_its_prefix_and_the_same_total_quadratic_cost():
    # ChunkedPrefill, one group, 2K-token budget (2048), attention c2 = 1 ms per (1K)², one layer.
    # A 5K-token prompt (5120): chunks 2K (P 0), 2K (P 2K), 1K (P 4K) cost c·(2P + c) in K²:
    # 2·(0+2) = 4, 2·(4+2) = 12, 1·(8+1) = 9 ms: 25 ms = 5², what it costs unchunked.
    sc = scenario(layers=1, default_dp=1, default_tp=1, attn_tp_ref=1, attn_c2_ms=1.0, chunk_tokens=2048)
    res = simulate("chunked", requests([0], [5120]), sc)
    assert res.ttft_ns.tolist() == [25 * MS] and res.steps == 3
    assert simulate("default", requests([0], [5120]), sc).ttft_ns.tolist() == [25 * MS]


def test_chunked_tail_stays_on_its_group_and_goes_first():
    # One group, budget 2048, attention 1 ms per 1K, one layer. A (3072) at 0, B (1536) at 0.
    # Step 1: longest-first A gets the 2048 budget (1024 tail), B does not fit: 2 ms.
    # Step 2 (t=2): A's tail first (1024), then B cut to the remaining 1024: 2 ms → A ends at 4.
    # Step 3 (t=4): B's tail of 512: 0.5 ms → B ends at 4.5 ms.
    sc = scenario(layers=1, default_dp=1, default_tp=1, attn_tp_ref=1, attn_c1_ms=1.0, chunk_tokens=2048)
    res = simulate("chunked", requests([0, 0], [3072, 1536]), sc)
    assert res.end_ns.tolist() == [4 * MS, 4 * MS + MS // 2]


def test_prefix_cache_hits_are_not_recomputed():
    # 5K tokens (5120) of which 4K (4096) are cached: one piece c = 1K, P = 4K: c2 term
    # c·(2P + c) = 1·(8 + 1) = 9 K² → 9 ms
    sc = scenario(layers=1, default_dp=1, default_tp=1, attn_tp_ref=1, attn_c2_ms=1.0)
    res = simulate("default", requests([0], [5120], cached=[4096]), sc)
    assert res.ttft_ns.tolist() == [9 * MS]


def test_dual_batch_ping_pong_by_hand():
    # One ASAP group, two layers; attention 3 ms (c0), dispatch = combine = 1 ms, pool 2 ms per
    # item (plateau, E_ref = 0). Two 2048-token requests at 0, each its own batch (≥ 2K).
    # Dual-batch: b0 attention 0–3, pool 4–6, back at 7; b1 attention 3–6 (the group's compute
    #   is FCFS), pool 7–9, back at 10. Layer 2: b0 attention 7–10, pool 11–13, done 14;
    #   b1 attention 10–13, pool 14–16, done 17. So TTFT 14 and 17 ms; own = 2·(3+1+2+1) = 14.
    # One batch per group: b1 starts when b0 is done at 14 and takes 14 more: 28.
    sc = scenario(layers=2, asap_dp=1, attn_c0_ms=3, xfer_latency_ms=1, moe_plateau_ms=2)
    req = requests([0, 0], [2048, 2048])
    res = simulate("asap", req, sc)
    assert (res.ttft_ns // MS).tolist() == [14, 17]
    assert (res.own_ns // MS).tolist() == [14, 14]
    assert (res.queue_ns // MS).tolist() == [0, 0] and (res.sync_ns // MS).tolist() == [0, 3]
    single = simulate("asap-no-dual-batch", req, sc)
    assert (single.ttft_ns // MS).tolist() == [14, 28]
    assert (single.queue_ns // MS).tolist() == [0, 14]


def test_asap_ablations_cost_what_the_table_says():
    # Same as above, one request, one layer: 3 + 1 + 2 + 1 = 7 ms.
    # No super kernel: + launch 0.22 ms per pool item → 7.22 ms.
    # No overlap: the pool also serialises (T/E)·(dispatch + combine) = (4/16)·2 = 0.5 ms → 7.5.
    sc = scenario(layers=1, asap_dp=1, attn_c0_ms=3, xfer_latency_ms=1, moe_plateau_ms=2)
    req = requests([0], [2048])
    assert simulate("asap", req, sc).ttft_ns.tolist() == [7 * MS]
    assert simulate("asap-no-super-kernel", req, sc).ttft_ns.tolist() == [7_220_000]
    assert simulate("asap-no-overlap", req, sc).ttft_ns.tolist() == [7_500_000]


def test_a_long_prompt_runs_alone_on_an_idle_group():
    # One group of TP4 (the constants' TP), dual-batch, one layer, attention 1 ms per 1K, nothing
    # else. A (2048 = 2K) at 0 starts at once in slot 0: 2 ms. B (20480 = 20K > 16K) at 0.5 ms:
    # the group is busy, so B waits for it to drain, then runs alone: 2 → 22 ms.
    # C (2K) at 1 ms arrives behind B: the group is reserved for B, so C starts after B: 22 → 24.
    sc = scenario(layers=1, asap_dp=1, attn_c1_ms=1.0)
    res = simulate("asap", requests([0, 0.5, 1], [2048, 20480, 2048]), sc)
    assert res.start_ns.tolist() == [0, 2 * MS, 22 * MS]
    assert res.end_ns.tolist() == [2 * MS, 22 * MS, 24 * MS]


def test_asap_batches_are_cut_fifo_to_at_least_2k_tokens():
    # Four 600-token requests queued behind a busy group: the next batch is cut FIFO until it
    # holds ≥ 2048 tokens → all four (2400 tokens) in one batch, which ends together.
    sc = scenario(layers=1, asap_dp=1, attn_c1_ms=1.0)
    res = simulate("asap-no-dual-batch", requests([0, 1, 1, 1, 1], [4096, 600, 600, 600, 600]), sc)
    assert res.steps == 2
    assert len(set(res.end_ns[1:].tolist())) == 1


@pytest.mark.parametrize("policy", ["default", "chunked", "asap"])
def test_every_request_is_served_and_its_ttft_adds_up(policy):
    """Consistency check: sync is defined as the remainder, so queue + own + sync = TTFT by
    construction; what is tested is that every request finishes and own ≤ time in service."""
    sc = load_scenario("asap-paper").with_knobs({"duration_s": 20})
    rng = np.random.default_rng(3)
    n = 60
    req = ServingRequests(
        np.cumsum(rng.exponential(2e8, n)).astype(np.int64), sc.lengths.sample(rng, n), np.zeros(n, np.int64)
    )
    res = simulate(policy, req, sc)
    assert (res.end_ns > res.arrival_ns).all()
    assert (res.queue_ns >= 0).all() and (res.own_ns > 0).all() and (res.sync_ns >= -n).all()
    assert (res.queue_ns + res.own_ns + res.sync_ns == res.ttft_ns).all()


def test_two_micro_batch_overlap_by_hand():
    # Default on one group of one die, two 1K-token (1024) requests at 0, two layers; attention
    # 1 ms per 1K, MoE 1 ms per 1K (E_ref = 0), dispatch = combine = 1 ms. Without overlap a layer
    # is A(2K) 2 + X 1 + M(2K) 2 + X 1 = 6 ms: the step takes 12 ms.
    # With two micro-batches (one request each), compute stream: attn a 0–1, attn b 1–2,
    # MoE a 2–3 (after dispatch a 1–2), MoE b 3–4 (dispatch b 2–3); communication stream:
    # combine a 3–4, combine b 4–5. Layer 2: attn a 4–5 (combine a back at 4, compute free
    # at 4), attn b 5–6, dispatch a 5–6, b 6–7, MoE a 6–7, b 7–8, combine a 7–8, b 8–9: 9 ms.
    sc = scenario(
        layers=2, default_dp=1, default_tp=1, attn_tp_ref=1, attn_c1_ms=1.0, moe_b_ms=1.0, xfer_latency_ms=1.0
    )
    req = requests([0, 0], [1024, 1024])
    assert simulate("default", req, sc).ttft_ns.tolist() == [12 * MS, 12 * MS]
    overlapped = simulate("default", req, sc.with_knobs({"default_micro_batch_overlap": True}))
    assert overlapped.ttft_ns.tolist() == [9 * MS, 9 * MS]
    # a lone request has no partner micro-batch: 2·(1 + 1 + 1 + 1) = 8 ms either way, its own
    # kernel time all of it (the last combine counts, though the empty micro-batch ends first)
    alone = simulate("default", requests([0], [1024]), sc.with_knobs({"default_micro_batch_overlap": True}))
    assert alone.ttft_ns.tolist() == [8 * MS] and alone.sync_ns.tolist() == [0]


def test_balanced_places_by_attention_work_not_tokens():
    # Two groups, one layer, attention c2 only (1 ms per (1K)²). Requests 3K, 2K, 2K, 1K (3072,
    # 2048, 2048, 1024) at 0. Default (fewest tokens): 3K → g0, 2K → g1, 2K → g1 (2K < 3K),
    # 1K → g0 (3K < 4K): g0 9 + 1 = 10 ms, g1 4 + 4 = 8 → step 10.
    # Balanced (least attention work, heaviest first): 3K → g0 (9), 2K → g1 (4),
    # 2K → g1 (8), 1K → g1 (8 < 9 → 9): both 9 ms → step 9.
    sc = scenario(layers=1, default_dp=2, default_tp=1, attn_tp_ref=1, attn_c2_ms=1.0)
    req = requests([0, 0, 0, 0], [3072, 2048, 2048, 1024])
    assert simulate("default", req, sc).end_ns.max() == 10 * MS
    assert simulate("balanced", req, sc).end_ns.max() == 9 * MS


def test_attention_scales_with_tp_asap_2x8_against_4x4():
    # The one TP rule (costs.py): the attention constants hold for attn_tp_ref = 4 dies; a group
    # of T dies pays × 4/T. Attention 1 ms per 1K at TP4, nothing else, one layer, one batch per
    # group, every batch one request (min batch 1 token). Four 8K-token (8192) requests at 0.
    # asap 4×4: each group takes one: 8·4/4 = 8 ms each → TTFT 8, 8, 8, 8 (mean 8 ms).
    # asap 2×8 (the same 16 attention dies): per-group attention halves, 8·4/8 = 4 ms; groups 0
    #   and 1 take requests 0 and 1 (0–4 ms), then 2 and 3 (4–8 ms) → TTFT 4, 4, 8, 8 (mean 6).
    # The last request ends at 8 ms either way: the same dies do the same work.
    base = dict(layers=1, attn_c1_ms=1.0, asap_min_batch_tokens=1)
    req = requests([0, 0, 0, 0], [8192] * 4)
    tp4 = simulate("asap-no-dual-batch", req, scenario(**base, asap_dp=4, asap_tp=4))
    tp8 = simulate("asap-no-dual-batch", req, scenario(**base, asap_dp=2, asap_tp=8))
    assert tp4.ttft_ns.tolist() == [8 * MS] * 4 and tp4.own_ns.tolist() == [8 * MS] * 4
    assert tp8.ttft_ns.tolist() == [4 * MS, 4 * MS, 8 * MS, 8 * MS]
    assert tp8.own_ns.tolist() == [4 * MS] * 4  # each request's attention on TP8: half of TP4's
    # Default follows the same rule with default_tp: one 8K request alone, DP2×TP8 vs DP4×TP4
    # (MoE and transfers free): 8·4/8 = 4 ms against 8 ms
    one = requests([0], [8192])
    assert simulate(
        "default", one, scenario(layers=1, attn_c1_ms=1.0, default_dp=2, default_tp=8)
    ).ttft_ns.tolist() == [4 * MS]
    assert simulate(
        "default", one, scenario(layers=1, attn_c1_ms=1.0, default_dp=4, default_tp=4)
    ).ttft_ns.tolist() == [8 * MS]


def test_asap_ties_go_to_the_lowest_group_not_the_lightest():
    # Two ASAP groups (TP4), dual-batch, one layer, attention 1 ms per 1K, nothing else; every
    # batch one request (min batch 1 token). At 0: A (8K), B (1K), C (1K), in that order.
    # A → group 0 (both idle: lowest index), B → group 1 (0 busy slots against 1).
    # C: both groups have one busy slot, so the lowest index wins — group 0, which holds 8K tokens
    # in flight, not group 1 with 1K: C's attention queues behind A's (FCFS on the group's
    # compute), 8 → 9 ms. (Placing by tokens in flight would have put it on group 1: 1 → 2 ms.)
    sc = scenario(layers=1, asap_dp=2, attn_c1_ms=1.0, asap_min_batch_tokens=1)
    res = simulate("asap", requests([0, 0, 0], [8192, 1024, 1024]), sc)
    assert res.end_ns.tolist() == [8 * MS, 1 * MS, 9 * MS]


def test_afd_pingpong_micro_batches_ping_pong_by_hand():
    # One attention group of one die, one FFN die, one layer; attention 1 ms per 1K new tokens,
    # MoE 1 ms per 1K (no plateau, E_ref 0), no transfer cost. Two 4K prompts at t = 0, m = 2:
    # micro-batch A (one prompt): attention 0–4, FFN 4–8 → 8 ms; B: attention 4–8 (while A is on
    # the FFN), FFN 8–12 → 12 ms. The coupled step holds both: attention 8 + MoE 8 → 16 ms each.
    sc = scenario(
        layers=1, asap_dp=1, asap_tp=1, asap_experts=1, attn_tp_ref=1, attn_c1_ms=1.0, moe_b_ms=1.0,
        default_dp=1, default_tp=1,
    )  # fmt: skip
    req = requests([0, 0], [4096, 4096])
    afd = simulate("afd-pingpong-m2", req, sc)
    assert sorted(afd.ttft_ns.tolist()) == [8 * MS, 12 * MS] and afd.policy == "afd-pingpong-m2"
    assert simulate("coupled", req, sc).ttft_ns.tolist() == [16 * MS, 16 * MS]
    # one 8K prompt: one micro-batch, attention 8 then FFN 8 → 16 ms, no ping-pong to gain
    assert simulate("afd-pingpong-m2", requests([0], [8192]), sc).ttft_ns.tolist() == [16 * MS]
