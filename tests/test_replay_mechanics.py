"""Hand-worked cases of the lockstep and pipelined mechanics (times in ns, worked out in comments)."""

from __future__ import annotations

import numpy as np
import pytest

from asaptrace.replay.mechanics.formers import Batch, StaticBatches
from asaptrace.replay.mechanics.lockstep import chain_from_costs, run_chain
from asaptrace.replay.mechanics.pipeline_run import run_pipeline
from asaptrace.replay.mechanics.pipelined import PipelineConfig
from asaptrace.replay.policies.afd_pingpong import pingpong_batches

# Two DP groups of one die each, two MoE layers. Attention per layer: group 0 [10, 4], group 1
# [4, 10]; MoE: rank 0 takes 3, rank 1 takes 2; dispatch and combine transfers 1 each.
ATTN = np.array([[10, 4], [4, 10]])
MOE = np.array([[3, 3], [2, 2]])
XFER = np.array([1, 1])


def test_coupled_two_groups_exact_barrier_wait_and_makespan():
    # layer 0: dispatch arrivals 10, 4 → release 10, ends 11 (rank 1 waits 6);
    #          combine arrivals 11+3 = 14, 11+2 = 13 → release 14, ends 15 (rank 1 waits 1)
    # layer 1: dispatch arrivals 15+4 = 19, 15+10 = 25 → release 25, ends 26 (rank 0 waits 6);
    #          combine arrivals 29, 28 → release 29, ends 30 (rank 1 waits 1)
    ct = run_chain(chain_from_costs(ATTN, MOE, XFER, XFER, tp=1))
    assert ct.release.tolist() == [10, 14, 25, 29]
    assert ct.makespan_ns == 30
    assert ct.wait_ns.sum(axis=0).tolist() == [6, 8]  # rank 0: 6; rank 1: 6 + 1 + 1


def test_tp_members_share_their_group_attention():
    # same case with TP2: ranks 0, 1 are group 0 and ranks 2, 3 group 1 — the same releases
    ct = run_chain(chain_from_costs(ATTN, np.repeat(MOE, 2, axis=0), XFER, XFER, tp=2))
    assert ct.release.tolist() == [10, 14, 25, 29] and ct.makespan_ns == 30


def _batch(i: int, attn, moe, xfer=(1, 1), alone=False, ready=0) -> Batch:
    return Batch(
        batch_id=i,
        ready_ns=ready,
        attention_ns=np.array(attn),
        dispatch_ns=np.array(xfer),
        moe_ns=np.array(moe),
        combine_ns=np.array(xfer),
        alone=alone,
        key=(0, i, 0),
    )


def test_asap_two_groups_exact_pipelined_makespan_without_barrier():
    # The same work on ASAP: group g runs batch g, a one-die pool serves items FIFO.
    # b1: attn 0–4, pool 5–7, back 8, attn 8–18, pool arrival 19.
    # b0: attn 0–10, pool 11–14, back 15, attn 15–19, pool arrival 20.
    # pool: b1·l1 19–21 → b1 back 22 (done); b0·l1 21–24 → b0 back 25 (done). Makespan 25 < 30.
    b = [_batch(0, [10, 4], [3, 3]), _batch(1, [4, 10], [2, 2])]
    tr = run_pipeline(PipelineConfig(groups=2, slots=1), StaticBatches(b, groups=2))
    assert tr.done == {0: 25, 1: 22}
    assert sorted((x[0], x[1], x[2], x[3]) for x in tr.moe) == [
        (0, 0, 11, 14),
        (0, 1, 21, 24),
        (1, 0, 5, 7),
        (1, 1, 19, 21),
    ]


def test_dual_batch_interleaves_two_batches_on_one_group():
    # One group, two batches of attention 10 per layer (2 layers), MoE 10, transfers 0.
    # Two slots: A 0–10 (b0·l0), 10–20 (b1·l0), pool b0·l0 10–20, b0·l1 A 20–30, pool b1·l0 20–30,
    # b1·l1 A 30–40, pool b0·l1 30–40 (b0 done 40), pool b1·l1 40–50 (b1 done 50).
    # One slot: b0 runs 0–10 A, 10–20 pool, 20–30 A, 30–40 pool; b1 the same from 40 → done 80.
    b = [_batch(0, [10, 10], [10, 10], (0, 0)), _batch(1, [10, 10], [10, 10], (0, 0))]
    two = run_pipeline(PipelineConfig(groups=1, slots=2), StaticBatches(b, groups=1))
    one = run_pipeline(PipelineConfig(groups=1, slots=1), StaticBatches(b, groups=1))
    assert two.done == {0: 40, 1: 50} and one.done == {0: 40, 1: 80}


def test_a_long_prompt_batch_runs_alone():
    # b0 (ordinary) takes a slot at 0; b1 is marked alone: it waits until the group is idle (b0
    # done at 40 as above), then runs by itself 40–80; b2 (ordinary) queues behind it (FIFO).
    b = [_batch(i, [10, 10], [10, 10], (0, 0), alone=(i == 1)) for i in range(3)]
    tr = run_pipeline(PipelineConfig(groups=1, slots=2), StaticBatches(b, groups=1))
    assert tr.done[0] == 40 and tr.done[1] == 80 and tr.done[2] == 120


def test_back_pressure_blocks_a_sender_until_a_buffer_slot_frees():
    # two groups send at time 1 into a pool with one buffer slot: b0's item holds it 1–11; b1's
    # dispatch finds it full and enters when it frees at 11 → served 11–21 (unbounded: the same
    # service, since the pool is FIFO) — and nothing is lost: both finish.
    b = [_batch(i, [1], [10], (0,)) for i in range(2)]
    tight = run_pipeline(PipelineConfig(groups=2, slots=1, buffer_slots=1), StaticBatches(b, groups=2))
    assert tight.done == {0: 11, 1: 21}


def test_no_super_kernel_and_no_overlap_lengthen_each_pool_item():
    # one batch, one layer: attn 10, dispatch 2, MoE 10, combine 2.
    # super kernel on, overlap on: 10 + 2 + 10 + 2 = 24
    # launch 5 per item: 29; no overlap with comm share 0.5: pool + 0.5·(2 + 2) = 2 → 26
    b = [_batch(0, [10], [10], (2,))]
    assert run_pipeline(PipelineConfig(groups=1), StaticBatches(b)).done[0] == 24
    assert run_pipeline(PipelineConfig(groups=1, launch_ns=5), StaticBatches(b)).done[0] == 29
    assert (
        run_pipeline(PipelineConfig(groups=1, overlap=False, comm_share=0.5), StaticBatches(b)).done[0] == 26
    )


@pytest.mark.parametrize(
    ("t_a", "t_e", "t_c", "m", "layers"), [(10, 10, 1, 4, 3), (8, 10, 1, 4, 5), (10, 6, 2, 3, 4)]
)
def test_afd_pingpong_matches_the_closed_form(t_a, t_e, t_c, m, layers):
    # MegaScale-Infer / Step-3: T_total = (T_a + T_e + 2·T_c) + T_f·(m·L − 1), T_f = max(T_a, T_e),
    # when m keeps the bottleneck busy (m ≥ 2(1 + T_c/T_f) here). Worked for (8, 10, 1, 4, L):
    # the pool (bottleneck) gets its first item at 9 and is busy from then on for m·L items of 10,
    # and the last one returns 1 later: 9 + 10·m·L + 1 = (8 + 10 + 2) + 10·(m·L − 1).
    t_f = max(t_a, t_e)
    assert m >= 2 * (1 + t_c / t_f)
    batches = pingpong_batches(np.full(layers, t_a), np.full(layers, t_e), np.full(layers, t_c), m=m)
    tr = run_pipeline(PipelineConfig(groups=1, slots=m), StaticBatches(batches, groups=1))
    assert max(tr.done.values()) == (t_a + t_e + 2 * t_c) + t_f * (m * layers - 1)


def test_coupled_two_micro_batch_overlap_keeps_the_barriers():
    # Two groups (TP1), one layer, micro-batches A and B. Attention A: [10, 4], B: [6, 6];
    # MoE 3 everywhere; transfers 1. Compute stream per rank: attn A, attn B, MoE A, MoE B.
    # dA: arrivals 10, 4 → release 10, ends 11
    # dB: after attn B on the compute stream (from dA's arrival): 16, 10 → release 16, ends 17
    # cA: after dA's end and attn B: max(11, 16) + 3 = 19, max(11, 10) + 3 = 14 → 19, ends 20
    # cB: after dB's end and MoE A: max(17, 19) + 3 = 22, max(17, 14) + 3 = 20 → 22, ends 23
    from asaptrace.replay.mechanics.lockstep import chain_from_costs_two_mb

    attn = np.array([[[10], [4]], [[6], [6]]])
    moe = np.full((2, 1), 3)
    x = np.ones((2, 1), np.int64)
    ct = run_chain(chain_from_costs_two_mb(attn, moe, x, x, tp=1))
    assert ct.release.tolist() == [10, 16, 19, 22] and ct.makespan_ns == 23
    # the same work without overlap (one micro-batch doing A then B): attention 16, 10; MoE 6
    # → dispatch release 16 (ends 17), combine release 23 (ends 24): overlap saves 1
    serial = run_chain(
        chain_from_costs(np.array([[16], [10]]), np.array([6]), np.array([1]), np.array([1]), tp=1)
    )
    assert serial.makespan_ns == 24


def test_two_micro_batch_step_waits_for_the_longer_combine_of_a():
    # One rank, one layer. Attention A = B = 10, MoE A = B = 10, dispatches 0, combine A 100,
    # combine B 5. dA: arrives 10, ends 10. dB: after attention B, arrives 20, ends 20.
    # cA: after dA's end and attention B (20) + MoE A 10 = 30, ends 30 + 100 = 130.
    # cB: after dB's end (20) and MoE A (30) + MoE B 10 = 40, ends 45.
    # The step is done when both combines are: 130, not 45 (cB is the chain's last instance).
    from asaptrace.replay.mechanics.lockstep import chain_from_costs_two_mb

    attn = np.full((2, 1, 1), 10)
    moe = np.full((2, 1), 10)
    dispatch = np.zeros((2, 1), np.int64)
    combine = np.array([[100], [5]])
    ct = run_chain(chain_from_costs_two_mb(attn, moe, dispatch, combine, tp=1))
    assert ct.end[:, 0].tolist() == [10, 20, 130, 45]
    assert ct.step_end.tolist() == [130] and ct.makespan_ns == 130


def test_batch_costs_come_from_the_cost_model():
    from asaptrace.replay.costs import CostModel
    from asaptrace.replay.mechanics.formers import batch_costs

    # one 4K prompt (4096 tokens; 1K = 1,024), 2 layers (the first dense), TP4 attention, a 16-die
    # pool (DOMAIN defaults): attention 1.41·4 + 0.0215·16 = 5.984 ms per layer; dispatch/combine
    # of 1K tokens per die 0.19 + 0.71 = 0.9 ms; MoE of 4K tokens on 16 dies 0.23 + 0.572·4 =
    # 2.518 ms; dense layer: no pool item
    a, d, m, c = batch_costs(CostModel(), [4096], [0], layers=2, dense_layers=1, tp=4, experts=16)
    assert a.tolist() == [5_984_000, 5_984_000]
    assert d.tolist() == c.tolist() == [0, 900_000]
    assert m.tolist() == [0, 2_518_000]
    # on TP8 the attention halves (× attn_tp_ref 4 / 8 = 2.992 ms) and each die sends 512 tokens
    # (0.19 + 0.71·0.5 = 0.545 ms); the pool is unchanged
    a, d, m, c = batch_costs(CostModel(), [4096], [0], layers=2, dense_layers=1, tp=8, experts=16)
    assert a.tolist() == [2_992_000, 2_992_000]
    assert d.tolist() == c.tolist() == [0, 545_000]
    assert m.tolist() == [0, 2_518_000]


def test_an_online_former_is_asked_again_when_a_slot_frees():
    # The batch-formation hook as the online sweep uses it: requests arrive at 0 and 3; one group,
    # one slot; each batch = the queued requests, attention 10, MoE 5 (one layer, no transfer).
    # t=0: r0 forms a batch → attention 0–10, pool 10–15, done 15. t=3: the slot is taken, the
    # former is not asked to place r1 yet; at 15 the slot frees → r1: 15–25, pool 25–30, done 30.
    class Queue:
        def __init__(self) -> None:
            self.arrivals = {0: 0, 1: 3}
            self.taken: set[int] = set()

        def wakeups(self):
            return sorted(self.arrivals.values())

        def fresh(self):
            return Queue()

        def next_batch(self, now_ns, group, group_idle):
            ready = [r for r, t in self.arrivals.items() if t <= now_ns and r not in self.taken]
            if not ready:
                return None
            self.taken.update(ready)
            return _batch(min(ready), [10], [5], (0,), ready=now_ns)

    tr = run_pipeline(PipelineConfig(groups=1, slots=1), Queue())
    assert tr.done == {0: 15, 1: 30}  # TTFT: r0 15 − 0, r1 30 − 3
