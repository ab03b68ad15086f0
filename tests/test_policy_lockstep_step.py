"""The coupled online step's layer in closed form equals the replay's lockstep mechanics.

``lockstep_cost._layer_ns`` no longer builds and runs a one-layer chain per step (the hot loop of
a coupled serving run); these hold its closed form (slowest group's attention + dispatch + MoE +
combine) to :func:`run_chain` on :func:`chain_from_costs`, and a hand-worked step.
"""

from __future__ import annotations

import numpy as np

from asaptrace.replay.mechanics.lockstep import chain_from_costs, run_chain
from asaptrace.replay.policies.lockstep_cost import _layer_ns


def test_hand_worked_layer() -> None:
    # groups' attention 5, 9, 7 ns; dispatch 2 after the barrier at 9; MoE 4; combine 2: 9 + 2 + 4 + 2
    assert _layer_ns(np.array([5, 9, 7]), 4, 2) == 17


def test_closed_form_equals_the_chain() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        d, tp = int(rng.integers(1, 12)), int(rng.integers(1, 5))
        attn = rng.integers(0, 10**7, d)
        attn[rng.random(d) < 0.3] = 0  # idle groups
        moe, xfer = int(rng.integers(0, 10**7)), int(rng.integers(0, 10**6))
        chain = chain_from_costs(attn[:, None], np.array([moe]), np.array([xfer]), np.array([xfer]), tp=tp)
        assert _layer_ns(attn, moe, xfer) == int(run_chain(chain).step_end.max())


def test_short_placement_equals_the_array_rule() -> None:
    """``place_longest_first`` on a short list (Python floats) places as on an array (numpy), ties
    and all: the online formers' steps go through the first, the offline replay the second."""
    from asaptrace.replay.mechanics.planner import place_longest_first

    rng = np.random.default_rng(11)
    for _ in range(300):
        n, bins = int(rng.integers(0, 20)), int(rng.integers(1, 6))
        w = rng.integers(0, 6, n).tolist()  # many ties
        assert place_longest_first(w, bins).tolist() == place_longest_first(np.array(w), bins).tolist()
    # hand-worked: 5 on bin 0, the first 3 and then the second on bin 1 (3 < 5), 1 on bin 0 (5 < 6)
    assert place_longest_first([3, 5, 3, 1], 2).tolist() == [1, 0, 1, 0]


def test_kept_parts_cost_a_step_as_the_array_formula() -> None:
    """The step coster (each group's attention kept by its pieces, MoE and transfer by whole token
    counts, filled a block at a time) gives the array formula's step time and shares to the last bit,
    over repeated and new groups, empty groups and fitted-looking constants."""
    from asaptrace.replay.costs import CostModel
    from asaptrace.replay.policies.lockstep_cost import Served, StepCoster, _step_cost

    rng = np.random.default_rng(3)
    costs = CostModel(attn_c0_ms=0.0731, attn_c1_ms=1.3177, attn_c2_ms=0.02371, coupled_k_s=1.37)
    for d in (1, 8, 96):
        st = Served(
            layers=61, dp=d, tp=4, step_tokens=262144, group_tokens=32768, routing="step", overlap=False
        )
        coster = StepCoster(costs, st)
        menu = [
            (int(c), int(p))
            for c, p in zip(rng.integers(1, 9000, 12), rng.integers(0, 3, 12) * 777, strict=True)
        ]
        for _ in range(60):
            groups = [
                [
                    (j, *menu[int(k)])
                    for j, k in enumerate(rng.integers(0, len(menu), int(rng.integers(0, 3))))
                ]
                for _ in range(d)
            ]
            if not any(groups):
                continue
            step_ns, shares = coster.cost(groups)
            want_ns, want_shares = _step_cost(groups, costs, st)
            assert step_ns == want_ns
            assert shares == [x for sh in want_shares for x in sh]


def test_piece_weight_is_the_cost_models() -> None:
    from asaptrace.replay.costs import CostModel
    from asaptrace.replay.policies.lockstep_cost import piece_weight

    costs = CostModel(attn_c1_ms=1.3177, attn_c2_ms=0.02371)
    for c, p in [(1, 0), (4096, 0), (777, 12345), (32768, 65536)]:
        assert piece_weight(costs, c, p) == float(costs.attention_weight(c, p))
