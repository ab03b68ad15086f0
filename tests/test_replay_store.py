"""replay_store on a hand-built DeepEP trace (tests/_analysis_helpers.moe_scenario), with and without
annotations: the coupled replay reproduces its step exactly, the replayed stores analyse as expected,
the JSON form and the CLI."""

from __future__ import annotations

import json

import polars as pl
import pytest

from asaptrace.pipeline import diagnose_store, enrich_store, replay_store
from asaptrace.replay.whatif.run import SCHEMA_VERSION
from asaptrace.store import TraceStore
from tests._analysis_helpers import ingest, moe_scenario, write_traces
from tests._cli import run_cli

US = 1000


@pytest.fixture(scope="module", params=[True, False], ids=["annotated", "deepep-names-only"])
def scenario(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("scenario")
    return enrich_store(ingest(write_traces(root / "t", moe_scenario(annotations=request.param)), root / "s"))


def test_coupled_replay_reproduces_the_hand_worked_step(scenario, tmp_path):
    # moe_scenario's docstring: step window [0, 850] µs on every rank; waits 480, 480, 80, 40 µs
    r = replay_store(scenario.path, "coupled", out=tmp_path / "c.store")
    assert [s["measured_ns"] for s in r.steps] == [850 * US]
    assert [s["replayed_ns"] for s in r.steps] == [850 * US]
    assert r.error_mean_pct == 0 and r.error_max_pct == 0
    assert r.simulated_wait_ns == (480 + 480 + 80 + 40) * US
    diag = diagnose_store(TraceStore.open(r.out))
    waits = diag.tables["barrier_by_rank"].sort("rank")["wait_ns"].to_list()
    assert waits == [480 * US, 480 * US, 80 * US, 40 * US]


def test_asap_replay_has_no_barrier_and_says_what_it_simulated(scenario, tmp_path):
    r = replay_store(
        scenario.path, "asap", params={"attention": "2x2", "experts": 4}, out=tmp_path / "a.store"
    )
    assert r.simulated_wait_ns == 0
    store = TraceStore.open(r.out)
    diag = diagnose_store(store)
    assert diag.tables["barrier_instances"].height == 0
    ranks = store.read("ranks")
    assert ranks.filter(pl.col("role") == "attention").height == 4
    assert ranks.filter(pl.col("role") == "expert").height == 4
    meta = store.meta["replay"]
    assert meta["policy"] == "asap" and meta["params"]["attention"] == "2x2"
    assert meta["error_max_pct"] == 0 and "attn_c1_ms" in meta["costs"]
    assert store.meta["accounting"]["read"] == store.meta["accounting"]["kept"] == store.read("events").height


def test_json_form_has_the_documented_fields(scenario):
    j = replay_store(scenario.path, "asap").to_json()
    assert j["schema_version"] == SCHEMA_VERSION == 2
    for key in (
        "policy",
        "steps",
        "measured_makespan_ns",
        "reference_makespan_ns",
        "makespan_ns",
        "latency",
        "consistency",
        "counterfactuals",
        "band",
        "bounds",
        "warnings",
        "recovered_ns",
        "reference_policy",
        "costs",
        "cost_fit",
        # schema 1's names, kept (totals are makespans now)
        "error_mean_pct",
        "error_max_pct",
        "baseline_ns",
        "replayed_ns",
    ):
        assert key in j
    assert set(j["steps"][0]) == {"step", "measured_ns", "reference_ns", "replayed_ns"}
    assert list(j["recovered_ns"]) == [
        "split_cost",
        "barrier_wait_removed",
        "overlap_gained",
        "launch_overhead_removed",
    ]
    assert all(c["deployment"]["devices"] == 4 for c in j["counterfactuals"])
    # the causes add up to reference makespan − what-if makespan
    assert sum(j["recovered_ns"].values()) == j["baseline_ns"] - j["replayed_ns"]
    assert j["replayed_ns"] == j["makespan_ns"] and j["baseline_ns"] == j["reference_makespan_ns"]
    json.dumps(j)


def test_cli_replay_prints_the_consistency_check_and_recovered_time(scenario, tmp_path):
    res = run_cli("replay", scenario.path, "--policy", "asap", "--attention", "1x2", "--experts", "2")
    assert res.code == 0
    assert "consistency check: the coupled replay differs from the measured steps by 0.00% mean" in res.text
    assert "barrier wait" in res.stdout and "removed" in res.stdout and "Makespan" in res.stdout
    # the question its numbers answer (the online ones answer another: docs/analyses/advise.md)
    assert "these batches as they arrived" in " ".join(res.stdout.split())
    res = run_cli("replay", scenario.path, "--policy", "coupled", "--json")
    j = json.loads(res.stdout)
    assert j["steps"][0]["replayed_ns"] == 850 * US
    # the JSON names the same question as the text, as sweep --json and advise's online block do
    assert j["question"] == "these batches as they arrived"


def test_cli_writes_a_store_and_refuses_to_overwrite_it(scenario, tmp_path):
    out = tmp_path / "r.store"
    assert run_cli("replay", scenario.path, "--policy", "coupled", "-o", out).code == 0
    assert TraceStore.open(out).meta["replay"]["policy"] == "coupled"
    # a replayed store has one simulated clock: its analysis says nothing of clocks "aligned"
    text = run_cli("analyze", out).stdout
    assert "Clocks aligned" not in text and "clock skew" not in text
    again = run_cli("replay", scenario.path, "--policy", "coupled", "-o", out)
    assert again.code == 2 and "--force" in again.stderr
    assert run_cli("replay", scenario.path, "--policy", "coupled", "-o", out, "--force").code == 0
    # balanced re-places requests: without their lengths it does not apply, in one line
    bal = run_cli("replay", scenario.path, "--policy", "balanced")
    assert bal.code == 2 and "balanced does not apply: the store has no batch composition" in bal.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--policy", "chunked", "--m", "3"], "has no parameter m"),
        (["--policy", "asap", "--attention", "four"], "--attention must look like 4x4"),
    ],
)
def test_cli_user_errors_are_one_line_exit_2(scenario, args, message):
    res = run_cli("replay", scenario.path, *args)
    assert res.code == 2 and message in res.stderr and res.stderr.strip().count("\n") == 0


def test_cli_bad_cost_file_and_bad_store(scenario, tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("[moe]\nspeed = 3\n")
    res = run_cli("replay", scenario.path, "--costs", bad)
    assert res.code == 2 and str(bad) in res.stderr and "unknown key moe.speed" in res.stderr
    res = run_cli("replay", tmp_path / "missing.store")
    assert res.code == 2 and "no such store directory" in res.stderr


def test_save_costs_writes_a_file_a_later_replay_reads(scenario, tmp_path):
    path = tmp_path / "fitted.toml"
    assert run_cli("replay", scenario.path, "--policy", "asap", "--save-costs", path).code == 0
    res = run_cli("replay", scenario.path, "--policy", "asap", "--costs", path, "--json")
    assert res.code == 0 and json.loads(res.stdout)["costs"]["source"] == "file fitted.toml"


def test_chunked_needs_the_batch_composition(scenario):
    res = run_cli("replay", scenario.path, "--policy", "chunked")
    assert res.code == 2 and "chunked does not apply: the store has no batch composition" in res.stderr


def test_a_store_without_enrichment_is_refused_in_one_line(tmp_path):
    raw = ingest(write_traces(tmp_path / "t", moe_scenario()), tmp_path / "raw")  # not enriched
    res = run_cli("replay", raw.path, "--policy", "coupled")
    assert res.code == 2 and "not enriched" in res.stderr and str(raw.path) in res.stderr
    assert not (tmp_path / "out").exists()


def test_asap_replay_of_the_hand_worked_step(tmp_path):
    # moe_scenario, annotated: groups {0, 1} and {2, 3} (TP2), 2 MoE layers, no batch composition.
    # MeasuredWork: attention per layer g0 = 100 µs, g1 = 300 µs (slowest member); pool (busiest expert
    # rank) 90 µs per layer; dispatch 20, combine 10 µs. On asap 2x2 + 4 expert dies (the measured
    # counts) without token counts a batch's pool item is 90 × (4/4) / 2 groups = 45 µs.
    # Placement (longest first): b1 (g1) → group 0, b0 (g0) → group 1; one batch per group.
    #   b0: attn 0–100, pool 120–165, back 175, attn 175–275, pool 295–340, back 350 (done)
    #   b1: attn 0–300, arrives 320 but the pool is busy until 340: 340–385, back 395,
    #       attn 395–695, pool 715–760, back 770 (done)  →  step 770 µs instead of 850
    root = tmp_path
    store = enrich_store(ingest(write_traces(root / "t", moe_scenario()), root / "s"))
    r = replay_store(store.path, "asap", params={"attention": "2x2", "experts": 4})
    assert [s["replayed_ns"] for s in r.steps] == [770 * US]
    assert sum(r.recovered_ns.values()) == (850 - 770) * US


def test_a_step_without_collectives_replays_as_measured(tmp_path):
    # two ranks, one annotated step of attention then MoE, no dispatch/combine: rank 0 runs
    # 0–100 + 100–120 µs, rank 1 0–150 + 150–170 µs; nothing to wait for, so the coupled replay is
    # the measured 170 µs, no wait
    from tests._analysis_helpers import ATTENTION, COMPUTE_STREAM, MOE, RankTrace

    traces = [RankTrace(r, 2, 0) for r in range(2)]
    for r, t in enumerate(traces):
        t.kernel(ATTENTION, 0, 100 + 50 * r, stream=COMPUTE_STREAM, launch_at=-5)
        t.kernel(MOE, 100 + 50 * r, 20, stream=COMPUTE_STREAM, launch_at=-4)
        t.annotation("prefill_step#0", -10, 200, {"step": 0, "dp_group": r})
    store = enrich_store(ingest(write_traces(tmp_path / "t", traces), tmp_path / "s"))
    r = replay_store(store.path, "coupled", out=tmp_path / "r.store")
    assert diagnose_store(TraceStore.open(r.out)).tables["step_breakdown"]["step_time_ns"].to_list() == [
        100 * US + 20 * US,
        170 * US,
    ]
    assert r.reference_policy == "coupled"
    assert [(s["measured_ns"], s["replayed_ns"]) for s in r.steps] == [(170 * US, 170 * US)]
    assert r.simulated_wait_ns == 0
