"""A policy defined here, outside ``asaptrace/``, gets ``replay``, ``sweep`` and ``advise`` (offline
and online) through the one registry with no other file changed (issue 26): its module is this
class, its registration one line, and every face then takes it by name.

``HalfCollectives`` is the coupled deployment on an interconnect twice as fast: every dispatch and
combine takes half as long, offline (the measured chain's transfers × 0.5) and online (the
scenario's transfer costs ÷ 2, through :meth:`LockstepPolicy.online_scenario`, so the serve and
the capacity bound both see it). It declares what ``advise`` needs: its label and the finding it
answers (the barrier wait at dispatch/combine).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from asaptrace.replay.mechanics.lockstep import scale_transfers
from asaptrace.replay.policies import POLICIES, Coupled, register_policy
from tests._cli import run_cli

NAME = "half-collectives"


@dataclass(frozen=True)
class HalfCollectives(Coupled):
    """The coupled deployment with every dispatch and combine half as long."""

    name: ClassVar[str] = NAME
    label: ClassVar[str] = "a 2× faster interconnect"
    answers: ClassVar[tuple[str, ...]] = ("barrier_wait",)

    def step_chains(self, wl, step, costs):
        return [scale_transfers(c, 0.5) for c in super().step_chains(wl, step, costs)]

    def online_scenario(self, scenario):
        sc = super().online_scenario(scenario)
        return sc.with_knobs({k: getattr(sc, k) / 2 for k in ("xfer_latency_ms", "xfer_per_k_ms")})

    def counterfactuals(self, wl):
        return [("faster_interconnect", self)]


@pytest.fixture(scope="module")
def plugin():
    register_policy(HalfCollectives)  # the one line a user's plugin module adds
    yield HalfCollectives
    POLICIES.unregister(NAME)  # the session's other tests see the built-ins only


def test_replay_takes_the_plugin_by_name(plugin, coupled_store):
    mine = json.loads(run_cli("replay", coupled_store.path, "--policy", NAME, "--json").stdout)
    assert mine["policy"] == NAME
    # the same chains by another road: coupled with every measured collective × 0.5 (k_s)
    from asaptrace.replay.whatif.measured import extract_measured_work
    from asaptrace.replay.whatif.run import replay_measured_work

    wl = extract_measured_work(coupled_store)
    by_ks = replay_measured_work(wl, "coupled", params={"k_s": 0.5}, attribute=False, band=False)
    assert mine["makespan_ns"] == by_ks.makespan_ns  # consistency check, not validation
    # faster collectives shorten the coupled run; the whole change is the plugin's one cause
    assert mine["makespan_ns"] < mine["reference_makespan_ns"]
    assert [c["cause"] for c in mine["counterfactuals"]] == ["faster_interconnect"]


def test_sweep_serves_the_plugin_beside_coupled(plugin):
    r = run_cli(
        "sweep", "--policies", f"coupled,{NAME}", "--rates", "1,2", "--duration", "20s", "-j", "1", "--json"
    )
    assert r.code == 0, r.stderr
    j = json.loads(r.stdout)
    # served on the coupled deployment it inherits (the paper's Default, DP8×TP4), its settings named
    served = j["policy_settings"][NAME]
    assert served["deployment"]["groups"] == 8 and served["deployment"]["tp"] == 4
    assert served["settings"]["k_s"] == 1.0
    # at 1 request/s the same arrivals meet shorter steps: a lower mean TTFT than coupled's
    at1 = {p: j["mean_ttft_ns_at_1rps"][p] for p in ("coupled", NAME)}
    assert at1[NAME] < at1["coupled"]
    # its capacity bound by hand: a coupled step's work per request is attention + MoE + the
    # collectives X (capacity.py), and only X halves: 1/B = 1/B_attn + 1/B_moe + X/2
    cap, mine = j["capacity"]["coupled"]["resources"], j["capacity"][NAME]["resources"]
    x = 1 / cap["coupled steps"] - 1 / cap["attention groups"] - 1 / cap["MoE on the attention dies"]
    assert mine["attention groups"] == cap["attention groups"]
    assert 1 / mine["coupled steps"] == pytest.approx(
        1 / cap["attention groups"] + 1 / cap["MoE on the attention dies"] + x / 2, rel=1e-3
    )


def test_advise_offline_and_online_run_the_plugin(plugin, coupled_store):
    r = run_cli("advise", coupled_store.path, "--online", "--json")
    assert r.code == 0, r.stderr
    j = json.loads(r.stdout)
    w = next(x for x in j["whatifs"] if x["name"] == NAME)
    # offline: its own label, the finding it declares it answers, the coupled-at-k_s-0.5 answer
    assert w["applies"] and w["label"] == "a 2× faster interconnect" and w["policy"] == NAME
    assert [a["code"] for a in w["answers"]] == ["barrier_wait"]
    from asaptrace.replay.whatif.measured import extract_measured_work
    from asaptrace.replay.whatif.run import replay_measured_work

    wl = extract_measured_work(coupled_store)
    by_ks = replay_measured_work(wl, "coupled", params={"k_s": 0.5}, attribute=False, band=False)
    assert w["makespan_ns"] == by_ks.makespan_ns
    assert w["recovered_ns"] == by_ks.recovered_total_ns > 0
    # online: served as the very object replayed (the store's DP8×TP4, its faster collectives):
    # the same steady-state arrivals, shorter steps — at least coupled's SLO rate, within its bound
    o, online = w["online"], j["online"]
    assert o["slo_rps"] == online["slo_rps"][NAME] >= online["slo_rps"]["coupled"]
    assert o["slo_rps"] <= o["bound_rps"] and o["bound_rps"] > online["capacity"]["coupled"]["bound_rps"]
    assert o["arrivals"]["n_requests"] >= 2000
    assert "a 2× faster interconnect" in w["line"] and "online (served under load" in w["line"]
