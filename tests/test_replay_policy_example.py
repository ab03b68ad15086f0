"""The example policy of docs/analyses/replay.md, run as a user would: pasted in, then used by name
offline (``replay``) and online (``sweep``) through the one registry."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from asaptrace.replay.policies import POLICIES, policy_of, policy_specs
from asaptrace.replay.serving.requests import ServingRequests
from asaptrace.replay.serving.scenario import load_scenario
from asaptrace.replay.whatif.simulate import simulate

DOC = Path(__file__).resolve().parents[1] / "docs" / "analyses" / "replay.md"
MS = 1_000_000


@pytest.fixture(scope="module")
def example():
    """The doc's code block after ``<!-- example-policy -->``, executed (it registers itself)."""
    text = DOC.read_text(encoding="utf-8")
    code = re.search(r"<!-- example-policy -->\n```python\n(.*?)```", text, re.S)
    assert code, "docs/analyses/replay.md lost its example policy"
    assert len(code.group(1).strip().splitlines()) <= 30  # "a 30-line example policy"
    if "fast-network" not in POLICIES:  # as a user's plugin module would be imported
        module = types.ModuleType("example_policy")
        sys.modules[module.__name__] = module
        exec(compile(code.group(1), str(DOC), "exec"), module.__dict__)
    return POLICIES.get("fast-network")


def test_the_example_is_in_the_one_registry_offline_and_online(example):
    assert "fast-network" in policy_specs(online=True) and "fast-network" in policy_specs()


def test_the_example_online_by_hand(example):
    # One coupled group of one die, one layer, attention 1 ms per 1K new tokens, transfers 2 ms per
    # 1K, no MoE cost. A 4K prompt: attention 4 ms, dispatch 8 ms, combine 8 ms → TTFT 20 ms; on a
    # 2× faster interconnect dispatch and combine take 4 ms each → 12 ms.
    zero = dict.fromkeys(
        ("attn_c0_ms", "attn_c2_ms", "moe_plateau_ms", "moe_a_ms", "moe_b_ms", "moe_e_ref"), 0
    )
    sc = load_scenario("asap-paper").with_knobs(
        zero | {"layers": 1, "attn_tp_ref": 1} | {"attn_c1_ms": 1, "xfer_latency_ms": 0, "xfer_per_k_ms": 2}
    )
    req = ServingRequests(np.zeros(1, np.int64), np.array([4096]), np.zeros(1, np.int64))
    one = {"attention": "1x1"}  # the deployment is the policy's own setting
    assert simulate(policy_of("coupled", one), req, sc).ttft_ns.tolist() == [20 * MS]
    fast = simulate(policy_of("fast-network", one), req, sc)
    assert fast.ttft_ns.tolist() == [12 * MS] and fast.policy == "fast-network"


def test_the_example_offline_on_the_coupled_sample(example, coupled_store):
    from asaptrace.replay.whatif.measured import extract_measured_work
    from asaptrace.replay.whatif.run import replay_measured_work

    wl = extract_measured_work(coupled_store)
    fast = replay_measured_work(wl, "fast-network", params={"speedup": 2.0}, attribute=False, band=False)
    # the same chains by another road: coupled with every measured collective × 0.5 (k_s)
    halved = replay_measured_work(wl, "coupled", params={"k_s": 0.5}, attribute=False, band=False)
    assert fast.makespan_ns == halved.makespan_ns  # consistency check, not validation
    # a faster network shortens the run; the JSON names the policy and its parameter
    assert fast.makespan_ns < fast.reference_makespan_ns
    assert fast.policy == "fast-network" and fast.params["speedup"] == 2.0
