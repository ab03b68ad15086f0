"""Hand-worked cases of the lockstep chain's kernel-level dependencies (times in ns, worked in comments).

Two ranks (two DP groups of one die), two layers, one micro-batch unless said. Every case states
the program's kernels in launch order; a kernel starts when its input is ready, its stream's
previous kernel has ended and (with a host) its launch has reached the device.
"""

from __future__ import annotations

import numpy as np
import pytest

from asaptrace.replay.mechanics.lockstep import (
    KernelDeps,
    chain_from_costs,
    chain_from_costs_two_mb,
    run_chain,
)
from asaptrace.replay.mechanics.program import ProgramShape, coupled_program

# attention per layer: rank 0 takes 10, rank 1 takes 20; MoE 4; dispatch 5, combine 3
ATTN = np.array([[10, 10], [20, 20]])
MOE = np.array([4, 4])
DISPATCH = np.array([5, 5])
COMBINE = np.array([3, 3])


def test_dense_first_layer_has_no_barrier():
    # attention rank 0 [10, 30], rank 1 [20, 40]; layer 0's FFN (dense MLP) 5, layer 1's MoE 7;
    # dispatch 2, 3; combine 2, 3.
    # Barriers on both layers (the default): d0 arrivals 10, 20 → release 20, ends 22; FFN 22–27;
    #   c0 release 27, ends 29; attention 29–59 / 29–69; d1 release 69, ends 72; MoE 72–79; c1 ends 82.
    # Layer 0 dense: rank 0 attention 0–10, MLP 10–15; rank 1 20, 25. Layer 1: attention 15–45 /
    #   25–65; d1 arrivals 45, 65 → release 65, ends 68; MoE 68–75; c1 release 75, ends 78.
    attn = np.array([[10, 30], [20, 40]])
    ffn = np.array([5, 7])
    d, c = np.array([2, 3]), np.array([2, 3])
    barriers = run_chain(chain_from_costs(attn, ffn, d, c, tp=1))
    assert barriers.makespan_ns == 82
    dense = run_chain(chain_from_costs(attn, ffn, d, c, tp=1, deps=KernelDeps(dense_layers=1)))
    assert dense.makespan_ns == 78
    assert dense.chain.kernels is not None
    assert dense.chain.kernels.op == ["attention", "dense_mlp", "attention", "dispatch", "moe", "combine"]
    # the only barriers left are layer 1's: rank 0 waits 65 − 45 = 20 at its dispatch, nothing else
    assert dense.wait_ns.sum(axis=0).tolist() == [20, 0]
    assert dense.release[3] == 65 and dense.end[:, 0].tolist() == [10, 15, 45, 68, 75, 78]


def test_shared_expert_runs_beside_the_dispatch_and_delays_the_moe():
    # shared expert 8 on the compute stream after attention.
    # layer 0: attention 0–10 / 0–20; dispatch arrivals 10, 20 → release 20, ends 25;
    #   shared 10–18 / 20–28; MoE from max(25, shared end): 25–29 / 28–32; combine release 32, ends 35
    # layer 1: attention 35–45 / 35–55; dispatch release 55, ends 60; shared 45–53 / 55–63;
    #   MoE 60–64 / 63–67; combine release 67, ends 70.
    # Without it: MoE 25–29, combine ends 32; attention 32–42 / 32–52, dispatch ends 57, MoE 57–61,
    #   combine ends 64.
    assert run_chain(chain_from_costs(ATTN, MOE, DISPATCH, COMBINE, tp=1)).makespan_ns == 64
    ct = run_chain(
        chain_from_costs(ATTN, MOE, DISPATCH, COMBINE, tp=1, deps=KernelDeps(shared_ns=np.full(2, 8)))
    )
    assert ct.makespan_ns == 70
    assert ct.chain.kernels is not None
    moe = [k for k, op in enumerate(ct.chain.kernels.op) if op == "moe"]
    assert ct.arrival[moe].tolist() == [[25, 28], [60, 63]]
    # rank 0 waits 10 at each dispatch and 3 at each combine (its MoE ends 3 before rank 1's)
    assert ct.wait_ns.sum(axis=0).tolist() == [26, 0]


def test_host_blocked_on_the_dispatch_serialises_the_shared_expert_after_it():
    # as above, but the host waits for each dispatch to end before launching the shared expert
    # layer 0: dispatch ends 25 → host 25; shared 25–33 on both ranks; MoE 33–37; combine ends 40
    # layer 1: attention (launched long ago) 40–50 / 40–60; dispatch release 60, ends 65 → host 65;
    #   shared 65–73; MoE 73–77; combine ends 80 (70 without the host blocking).
    deps = KernelDeps(shared_ns=np.full(2, 8), host_blocking=True)
    ct = run_chain(chain_from_costs(ATTN, MOE, DISPATCH, COMBINE, tp=1, deps=deps))
    assert ct.makespan_ns == 80
    assert ct.host_end.tolist() == [65, 65]  # the host's last wait: layer 1's dispatch


def test_host_blocked_on_dispatch_a_delays_micro_batch_b_attention():
    # one layer, two micro-batches (DOMAIN's two-micro-batch overlap): attention A [10, 4], B [6, 6];
    # MoE 3; transfers 1. Launch order: attA, dA, attB, dB, moeA, cA, moeB, cB.
    # Host blocking: dA arrivals 10, 4 → release 10, ends 11 → host 11; attB launched at 11 runs
    #   11–17 on both (rank 1 could have started it at 4); dB release 17, ends 18 → host 18;
    #   MoE A 18–21, cA ends 22; MoE B 21–24, cB ends 25.
    # Without (the existing two-micro-batch chain): dB release 16, cA 19, cB release 22, ends 23.
    attn = np.array([[[10], [4]], [[6], [6]]])
    moe = np.full((2, 1), 3)
    x = np.ones((2, 1), np.int64)
    assert run_chain(chain_from_costs_two_mb(attn, moe, x, x, tp=1)).makespan_ns == 23
    ct = run_chain(chain_from_costs_two_mb(attn, moe, x, x, tp=1, deps=KernelDeps(host_blocking=True)))
    assert ct.makespan_ns == 25
    assert ct.arrival[2].tolist() == [11, 11]  # micro-batch B's attention


def test_launch_cost_and_latency_bind_short_kernels():
    # attention 2 / 4 per layer, MoE 1, transfers 1; the host launches one kernel every 3, a kernel
    # starts ≥ 1 after its launch. Launches 0, 3, 6, … for attention0, dispatch0, MoE0, combine0, …
    # attention0 1–3 / 1–5; dispatch0 arrivals max(3, 4) = 4, 5 → release 5, ends 6;
    # MoE0 from max(6, 6+1) = 7, ends 8; combine0 from 10 (launch 9), ends 11;
    # attention1 from 13: 13–15 / 13–17; dispatch1 arrivals 16, 17 → ends 18; MoE1 19–20;
    # combine1 from 22, ends 23. Host: 8 launches × 3 = 24.
    # Without a host: attention 0–2 / 0–4, dispatch ends 5, MoE 5–6, combine ends 7, attention 7–9 /
    #   7–11, dispatch ends 12, MoE 12–13, combine ends 14.
    attn, moe, x = np.array([[2, 2], [4, 4]]), np.array([1, 1]), np.array([1, 1])
    assert run_chain(chain_from_costs(attn, moe, x, x, tp=1)).makespan_ns == 14
    deps = KernelDeps(launch_ns=3, launch_latency_ns=1)
    ct = run_chain(chain_from_costs(attn, moe, x, x, tp=1, deps=deps))
    assert ct.makespan_ns == 23
    assert ct.launch[:, 0].tolist() == [0, 3, 6, 9, 12, 15, 18, 21]
    assert ct.arrival[:, 1].tolist() == [1, 5, 7, 10, 13, 17, 19, 22]
    assert ct.host_end.tolist() == [24, 24]


def _program_of(attn, moe, dispatch, combine, micro_batches):
    """The coupled program with every dependency off, from (M, G, L) / (M, R, L) / (M, L) costs."""

    def cost(op, layer, mb):
        if op == "attention":
            return attn[mb][:, layer]
        if op == "moe":
            return moe[mb][:, layer]
        return int((dispatch if op == "dispatch" else combine)[mb][layer])

    shape = ProgramShape(layers=attn.shape[2], micro_batches=micro_batches)
    return coupled_program(shape, cost, ranks=attn.shape[1])


@pytest.mark.parametrize(
    ("mbs", "attn_range", "moe_range", "xfer_max"),
    [
        # one micro-batch: any costs
        (1, (1, 50), (1, 20), 10),
        # two: the program adds one dependency the instance chain lacks, a stream runs one kernel
        # at a time (dispatch B after dispatch A ends, combine B after combine A); while each
        # micro-batch's compute (≥ 40) is longer than the other's wait plus transfer (spreads
        # ≤ 15, transfers < 5) it never binds
        (2, (40, 50), (40, 45), 5),
    ],
)
def test_consistency_check_program_without_dependencies_times_the_instance_chain(
    mbs, attn_range, moe_range, xfer_max
):
    # A consistency check (both sides are this code): with every kernel-level dependency off, the
    # kernel program times the same barriers and step ends as the instance chain.
    rng = np.random.default_rng(7 + mbs)
    for _ in range(20):
        attn = rng.integers(*attn_range, (mbs, 3, 4))
        moe = rng.integers(*moe_range, (mbs, 3, 4))
        d, c = rng.integers(0, xfer_max, (mbs, 4)), rng.integers(0, xfer_max, (mbs, 4))
        if mbs == 1:
            inst = run_chain(chain_from_costs(attn[0], moe[0], d[0], c[0], tp=1))
        else:
            inst = run_chain(chain_from_costs_two_mb(attn, moe, d, c, tp=1))
        prog = run_chain(_program_of(attn, moe, d, c, mbs))
        assert prog.step_end.tolist() == inst.step_end.tolist()
        assert sorted(prog.release[prog.chain.kernels.barrier].tolist()) == sorted(inst.release.tolist())
        assert prog.wait_ns.sum() == inst.wait_ns.sum()


def test_two_micro_batch_program_runs_combine_b_after_combine_a_on_its_stream():
    # The instance chain's case of a long combine A (one rank, one layer; attention 10, MoE 10,
    # dispatches 0, combine A 100, B 5): there combine B ends at 45, beside combine A (ends 130).
    # In the kernel program both combines share the combine stream: B starts when A ends, 130,
    # and ends 135 — the step is 135, not 130.
    attn = np.full((2, 1, 1), 10)
    moe = np.full((2, 1, 1), 10)
    d = np.zeros((2, 1), np.int64)
    c = np.array([[100], [5]])
    assert run_chain(chain_from_costs_two_mb(attn, moe[:, 0], d, c, tp=1)).makespan_ns == 130
    prog = run_chain(_program_of(attn, moe, d, c, 2))
    assert prog.end[-1].tolist() == [135] and prog.makespan_ns == 135


def test_a_kernel_program_is_drawn_kernel_by_kernel_on_its_streams():
    # The launch case above drawn as a replayed store's events: rank 1's kernels as hand-worked
    # there — attention 1–5, dispatch 5–6 (its arrival → end), MoE 7–8, combine 10–11, attention
    # 13–17, dispatch 17–18, MoE 19–20, combine 22–23 — on the compute (7), dispatch (20) and
    # combine (21) streams, layers 0 and 1.
    from asaptrace.replay.whatif.replayed_store import _draw_chain

    attn, moe, x = np.array([[2, 2], [4, 4]]), np.array([1, 1]), np.array([1, 1])
    ct = run_chain(chain_from_costs(attn, moe, x, x, tp=1, deps=KernelDeps(launch_ns=3, launch_latency_ns=1)))
    ev = _draw_chain(ct, None).filter(rank=1).sort("ts_ns")
    assert ev["kind"].to_list() == ["attention", "dispatch", "moe", "combine"] * 2
    assert list(zip(ev["ts_ns"], ev["ts_ns"] + ev["dur_ns"], strict=True)) == [
        (1, 5),
        (5, 6),
        (7, 8),
        (10, 11),
        (13, 17),
        (17, 18),
        (19, 20),
        (22, 23),
    ]
    assert ev["stream"].to_list() == [7, 20, 7, 21] * 2
    assert ev["layer"].to_list() == [0] * 4 + [1] * 4
