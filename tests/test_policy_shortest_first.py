"""The 'shortest-first' policy of docs/policies.md, added as the page says: its module (the page's
code block, written to a file and imported as a user's would be), this test, and one registry
line — no other file changed. Offline on the coupled sample and online on a hand-worked queue."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from asaptrace.replay.policies import POLICIES, policy_of, register_policy
from asaptrace.replay.serving.requests import ServingRequests
from asaptrace.replay.serving.scenario import load_scenario
from asaptrace.replay.whatif.simulate import simulate
from tests._cli import run_cli

DOC = Path(__file__).resolve().parents[1] / "docs" / "policies.md"
NAME = "shortest-first"
MS = 1_000_000


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    """The page's module, written as ``shortest_first.py`` and imported, then its one registry line."""
    code = re.search(r"<!-- shortest-first -->\n```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert code, "docs/policies.md lost its shortest-first module"
    where = tmp_path_factory.mktemp("plugin")
    (where / "shortest_first.py").write_text(code.group(1), encoding="utf-8")
    sys.path.insert(0, str(where))
    mod = importlib.import_module("shortest_first")
    register_policy(mod.ShortestFirst)  # the one registry line
    yield mod
    POLICIES.unregister(NAME)  # the session's other tests see the built-ins only
    sys.path.remove(str(where))
    sys.modules.pop("shortest_first")


def _one_die_one_layer():
    """One layer, attention 1 ms per 1,024 new tokens on one die; no MoE, transfer or launch cost."""
    zero = dict.fromkeys(
        (
            "attn_c0_ms",
            "attn_c2_ms",
            "moe_plateau_ms",
            "moe_a_ms",
            "moe_b_ms",
            "xfer_latency_ms",
            "xfer_per_k_ms",
        ),
        0,
    )
    return load_scenario("asap-paper").with_knobs(zero | {"layers": 1, "attn_tp_ref": 1, "attn_c1_ms": 1})


def test_shortest_prompts_go_first_online(module):
    sc = _one_die_one_layer()
    # three prompts arrive together: 4,096, 1,024 and 2,048 new tokens (4, 1 and 2 ms of attention)
    req = ServingRequests(np.zeros(3, np.int64), np.array([4096, 1024, 2048]), np.zeros(3, np.int64))
    # one attention die, one slot, one request per batch (a batch is full at its first token)
    one = {"attention": "1x1", "experts": 1, "min_batch_tokens": 1, "dual_batch": False}
    fifo = simulate(policy_of("asap", one), req, sc)
    mine = simulate(policy_of(NAME, one), req, sc)
    # FIFO: 4 ms, then 1 ms, then 2 ms → done at 4, 5, 7 ms; shortest first: 1, 2, then 4 → 7, 1, 3 ms
    assert fifo.end_ns.tolist() == [4 * MS, 5 * MS, 7 * MS]
    assert mine.end_ns.tolist() == [7 * MS, 1 * MS, 3 * MS]
    assert mine.policy == NAME


def test_its_own_label_and_no_inherited_ablations(module):
    cls = module.ShortestFirst
    assert cls.variants == {} and cls.robustness == ()  # asap's are asap's
    assert cls.whatif_label({"attention": "4x4", "experts": 16}) == "shortest prompts first at 4×4 + 16"
    assert NAME in {p["name"] for p in json.loads(run_cli("policies", "--json").stdout)["policies"]}


def test_shortest_batches_first_offline_on_the_coupled_sample(module, coupled_store):
    from asaptrace.replay.costs import CostModel
    from asaptrace.replay.whatif.measured import extract_measured_work

    wl = extract_measured_work(coupled_store)
    pol = policy_of(NAME)
    former = pol.former(wl, CostModel(), pol.deployment(wl)).fresh()  # a re-run keeps its order
    assert isinstance(former, module.ShortestBatchesFirst)
    out = []
    while (b := former.next_batch(1 << 62, 0, True)) is not None:
        out.append((b.ready_ns, int(b.attention_ns.sum() + b.moe_ns.sum())))
    assert len(out) == len(former.batches) and out == sorted(out)  # least work first at each ready time
    # through the CLI by name, labelled as itself
    r = run_cli("replay", coupled_store.path, "--policy", NAME, "--json")
    assert r.code == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["policy"] == NAME and j["makespan_ns"] > 0
