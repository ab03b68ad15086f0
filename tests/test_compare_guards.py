"""``compare`` says where two runs differ and refuses runs with nothing in common (issue 29)."""

from __future__ import annotations

import json

from asaptrace.analyze.compare import RunSummary, comparability
from tests._cli import run_cli

MOE_PREFILL = RunSummary(ranks=32, deployment="coupled", roles=("fused",), moe_layers=True, steps=2)


def test_the_same_run_twice_is_comparable_without_a_word():
    assert comparability(MOE_PREFILL, MOE_PREFILL) == ([], None)


def test_a_replay_on_another_deployment_is_compared_with_warnings():
    # the ASAP replay of the coupled run: same MoE work, 16 attention + 16 expert ranks
    asap = RunSummary(
        ranks=32, deployment="disaggregated", roles=("attention", "expert"), moe_layers=True, steps=2
    )
    warnings, refusal = comparability(MOE_PREFILL, asap, ("coupled.store", "asap.store"))
    assert refusal is None
    assert warnings == [
        "the runs differ in deployment: coupled in coupled.store, disaggregated in asap.store",
        "the runs differ in roles: roles fused in coupled.store, roles attention, expert in asap.store",
    ]


def test_other_work_on_the_same_layout_is_compared_with_a_warning():
    # a dense model on the same 32 coupled ranks: the work differs, the layout does not
    dense = RunSummary(ranks=32, deployment="coupled", roles=("fused",), moe_layers=False, steps=2)
    warnings, refusal = comparability(MOE_PREFILL, dense)
    assert refusal is None
    assert warnings == ["the runs differ in MoE layers: MoE layers in a, no MoE layers in b"]


def test_two_traced_ranks_of_a_larger_job_are_said_apart_from_a_whole_job():
    # HTA's sampled ranks: 2 of a 128-rank job, beside a whole 2-rank job of the same work
    sampled = RunSummary(
        ranks=2, deployment="unknown", roles=("unknown",), moe_layers=False, steps=2, declared_world=128
    )
    whole = RunSummary(ranks=2, deployment="unknown", roles=("unknown",), moe_layers=False, steps=2)
    warnings, refusal = comparability(sampled, whole, ("hta.store", "two.store"))
    assert refusal is None
    assert warnings == [
        "the runs differ in declared world size: a job of 128 ranks in hta.store, a job of 2 ranks in two.store"
    ]
    assert comparability(sampled, sampled) == ([], None)
    # two whole jobs of other sizes: the rank count says it, once
    assert [w for w in comparability(MOE_PREFILL, whole)[0] if "world size" in w] == []


def test_other_work_on_another_layout_is_refused():
    # DLRM: 8 ranks, no deployment known, no MoE layers, 1 step — work and layout both differ
    dlrm = RunSummary(ranks=8, deployment="unknown", roles=("unknown",), moe_layers=False, steps=1)
    warnings, refusal = comparability(MOE_PREFILL, dlrm, ("moe.store", "dlrm.store"))
    assert len(warnings) == 5  # ranks, deployment, roles, MoE layers, steps
    assert refusal == (
        "nothing to compare: moe.store (32 ranks, coupled, MoE layers) and dlrm.store (8 ranks, deployment "
        "unknown, no MoE layers) share neither their work nor their layout; compare runs of one workload "
        "(--force compares them anyway)"
    )
    # the same work on another layout (ranks and deployment both differ) is still compared
    moe8 = RunSummary(ranks=8, deployment="unknown", roles=("unknown",), moe_layers=True, steps=1)
    assert comparability(MOE_PREFILL, moe8)[1] is None


def test_cli_refuses_the_moe_sample_beside_dlrm_and_force_compares(coupled_store, shared_data, tmp_path):
    dlrm = tmp_path / "dlrm.store"
    made = run_cli("ingest", shared_data / "traces" / "kineto-dlrm-8rank", "-o", dlrm)
    assert made.code == 0, made
    run = run_cli("compare", coupled_store.path, dlrm)
    assert run.code == 2 and run.stdout == "", run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: nothing to compare: "), lines
    assert "(32 ranks, coupled, MoE layers, prefill steps)" in lines[0] and "dlrm.store (8 ranks," in lines[0]
    assert "training steps)" in lines[0]  # what each run did, as its trace says
    forced = run_cli("compare", coupled_store.path, dlrm, "--force", "--json")
    assert forced.code == 0, forced
    said = json.loads(forced.stdout)["warnings"]
    assert f"the runs differ in ranks: 32 ranks in {coupled_store.path.name}, 8 ranks in dlrm.store" in said
    # on stderr beside the tables, without --json
    text = run_cli("compare", coupled_store.path, dlrm, "--force")
    assert "warning: the runs differ in MoE layers" in text.stderr and "metric" in text.stdout


def test_cli_compares_a_store_with_itself_without_warnings(coupled_store):
    run = run_cli("compare", coupled_store.path, coupled_store.path, "--json")
    assert run.code == 0 and json.loads(run.stdout)["warnings"] == [], run


def test_a_training_run_beside_a_prefill_run_differs_in_its_work():
    # the same 32 coupled ranks with MoE layers, but its steps are training steps: warned, compared
    training = RunSummary(32, "coupled", ("fused",), True, 2, phases=("training",))
    prefill = RunSummary(32, "coupled", ("fused",), True, 2, phases=("prefill",))
    warnings, refusal = comparability(prefill, training, ("p.store", "t.store"))
    assert warnings == ["the runs differ in phase: prefill steps in p.store, training steps in t.store"]
    assert refusal is None
    # on another layout as well, nothing is comparable; a run that says no phase is not held against
    training8 = RunSummary(8, "unknown", ("unknown",), True, 1, phases=("training",))
    assert comparability(prefill, training8)[1] is not None
    assert comparability(MOE_PREFILL, training8)[1] is None


def test_report_and_dashboard_refuse_what_compare_refuses(coupled_store, shared_data, tmp_path):
    from asaptrace_dashboards.pages.compare import compare_body
    from asaptrace_dashboards.state import Stores

    dlrm = tmp_path / "dlrm.store"
    assert run_cli("ingest", shared_data / "traces" / "kineto-dlrm-8rank", "-o", dlrm).code == 0
    out = tmp_path / "r.html"
    run = run_cli("report", coupled_store.path, "--compare", dlrm, "-o", out)
    assert run.code == 2 and "nothing to compare" in run.stderr and not out.exists(), run
    stores = Stores([coupled_store.path, dlrm])
    keys = list(stores.keys)
    body = compare_body(stores, keys[0], keys[1])
    assert [getattr(c, "id", None) for c in body] == ["cmp-refused"]
    assert "nothing to compare" in body[0].children
