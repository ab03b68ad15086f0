"""A what-if users can trust (DOMAIN §7): null-safe joins, makespan accounting, the device total kept
by the counterfactuals, lower bounds, one-device stores, the best split, fit quality and the range.

Which test proves what: the lower bounds and the hand-worked two-step case are *validation* (they
hold whatever the code does, or are worked out by hand); the reference replay reproducing the
measured run is a *consistency check* (exact by construction) and is named so.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from asaptrace.errors import UsageError
from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import enrich_store, replay_store
from asaptrace.replay.costs import CostModel, fit_costs
from asaptrace.replay.mechanics.offline import item_costs
from asaptrace.replay.policies import policy_of
from asaptrace.replay.whatif.measured import extract_measured_work
from asaptrace.store import TraceStore
from tests._analysis_helpers import ATTENTION, COMPUTE_STREAM, MOE, RankTrace, ingest, write_traces
from tests._cli import run_cli
from tests._replay_helpers import SAMPLES, sample_store

US = 1000


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("whatif")


@pytest.fixture(scope="module")
def sidecar_store(root):
    """The coupled sample with its micro-batch annotations and request lengths removed from the
    traces, the lengths given back as a ``--batches`` sidecar (no micro-batch): the shape of most
    real traces."""
    src = SAMPLES / "coupled" / "kineto"
    if not src.is_dir():
        pytest.skip(f"sample trace {src} is absent")
    out = root / "stripped"
    out.mkdir()
    sidecar: dict[tuple[int, int], list[int]] = {}
    for f in sorted(src.glob("*.json.gz")):
        d = json.loads(gzip.decompress(f.read_bytes()))
        for e in d["traceEvents"]:
            a = e.get("args")
            if not a or e.get("cat") not in ("user_annotation", "gpu_user_annotation"):
                continue
            a.pop("micro_batch", None)
            if "seq_lens" in a:
                sidecar[(a["step"], a["dp_group"])] = a["seq_lens"]
                for k in ("seq_lens", "cached_lens", "request_ids", "arrivals_ns"):
                    a.pop(k, None)
        (out / f.name).write_bytes(gzip.compress(json.dumps(d).encode()))
    side = root / "batches.jsonl"
    side.write_text(
        "\n".join(
            json.dumps({"step": s, "dp_group": g, "seq_lens": lens})
            for (s, g), lens in sorted(sidecar.items())
        )
    )
    return enrich_store(ingest_paths([out], root / "stripped.store", jobs=1), batches=side)


def test_a_sidecar_store_without_micro_batches_fits_and_costs_its_moe(sidecar_store):
    wl = extract_measured_work(sidecar_store)
    assert wl.items["micro_batch"].null_count() == wl.items.height  # the events say no micro-batch
    assert wl.has_tokens  # the sidecar's lengths reach every item (null-safe join)
    fit = fit_costs(wl)
    for part in ("attention", "moe", "transfer"):
        assert fit.quality[part]["status"] == "fitted", part
        assert "sidecar" in fit.quality[part]["data"] or "batches" in fit.quality[part]["data"]
    ic = item_costs(wl, fit.model, tp=4, experts=16)
    moe_layers = ic.filter(pl.col("layer") >= 3)
    assert (moe_layers["moe_ns"] > 0).all() and (moe_layers["dispatch_ns"] > 0).all()
    assert (moe_layers["combine_ns"] > 0).all()


def _bounds_hold(r, wl) -> None:
    """Validation: the makespan is never below the busiest resource's work nor the ready span."""
    b = r.bounds
    assert r.makespan_ns >= b["ready_span_ns"]
    if "pool_work_ns" in b:
        assert r.makespan_ns >= b["pool_work_ns"] and r.makespan_ns >= b["attention_group_work_ns"]
    # and independently of the trace: the pool's Σ item costs from the offline former's costs
    if r.policy == "asap" and r.params.get("asynchronous", True):
        dep = r.deployment
        model = CostModel(**{k: v for k, v in r.costs.items() if k != "source"})
        experts = dep["experts"] - (1 if r.params.get("expert_failure") else 0)
        slots = 2 if r.params.get("dual_batch", True) else 1  # the former's items in flight
        ic = item_costs(wl, model, tp=dep["tp"], experts=experts, windows=(slots, dep["groups"] * slots))
        launch = 0 if r.params.get("super_kernel", True) else model.launch_ns * int((ic["moe_ns"] > 0).sum())
        assert r.makespan_ns >= int(ic["moe_ns"].sum()) + launch


@pytest.mark.parametrize("params", [{}, {"attention": "6x4", "experts": 8}, {"super_kernel": False}])
def test_lower_bounds_with_and_without_micro_batch_annotations(sidecar_store, root, params):
    for store in (sidecar_store, sample_store("coupled", root)):
        r = replay_store(store.path, "asap", params=params, attribute=False)
        _bounds_hold(r, extract_measured_work(store))


def test_lower_bounds_without_any_batches(root):
    # the hand-built DeepEP scenario has no batch composition at all
    from tests._analysis_helpers import moe_scenario

    store = enrich_store(ingest(write_traces(root / "nob", moe_scenario()), root / "nob.store"))
    wl = extract_measured_work(store)
    assert not wl.has_tokens
    for params in ({"attention": "2x2", "experts": 4}, {"attention": "1x2", "experts": 2}):
        r = replay_store(store.path, "asap", params=params)
        _bounds_hold(r, wl)
        assert any("no request lengths" in n for n in r.notes)


def _two_step_store(tmp_path):
    """Two ranks = two DP groups of TP1, two annotated steps of one MoE layer each (µs):

    step 0 at 0: rank 0 attention 0–100, MoE 100–120; rank 1 attention 0–40, MoE 40–60.
    step 1 at 150: the same. No dispatch/combine, so the coupled chain has no barrier and each
    rank just runs its work: measured makespan = 150 + 120 = 270 µs.
    """
    traces = [RankTrace(r, 2, 0) for r in range(2)]
    for step, t0 in enumerate((0, 150)):
        for r, t in enumerate(traces):
            a = (100, 40)[r]
            t.kernel(ATTENTION, t0, a, stream=COMPUTE_STREAM, launch_at=t0 - 5)
            t.kernel(MOE, t0 + a, 20, stream=COMPUTE_STREAM, launch_at=t0 - 4)
            t.annotation(f"prefill_step#{step}", t0 - 10, 140, {"step": step, "dp_group": r})
            t.annotation("layer#0", t0 - 6, 4, {"step": step, "layer": 0})
    return enrich_store(ingest(write_traces(tmp_path / "t", traces), tmp_path / "s"))


def test_a_what_if_slower_than_the_run_reports_its_makespan_not_a_sum(tmp_path):
    # On 1 attention group of 1 die + 1 expert die (asap 1x1 + 1), no dual batch, no transfers
    # measured (so 0), pool items: without token counts a batch's item is its measured pool time
    # × r(E)/r(E_meas) / G = 20 × (32/1)/(32/2) / 2 = 20 µs; attention × T_meas/T = × 1.
    # Batches (ready): s0g0 (0) attn 100, s0g1 (0) attn 40, s1g0 (150) attn 100, s1g1 (150) attn 40.
    # FIFO on the one group, one slot: s0g0 0–100, pool 100–120; s0g1 120–160, pool 160–180;
    # s1g0 (ready 150) 180–280, pool 280–300; s1g1 300–340, pool 340–360.
    # Makespan 360 µs (ready 0 → done 360). Per-step latencies: step 0 180, step 1 360 − 150 = 210:
    # their sum (390) would count 30 µs twice.
    store = _two_step_store(tmp_path)
    r = replay_store(
        store.path,
        "asap",
        params={"attention": "1x1", "experts": 1, "dual_batch": False},
        out=tmp_path / "r.store",
    )
    assert r.measured_makespan_ns == 270 * US
    assert r.reference_makespan_ns == 270 * US  # consistency check (exact by construction)
    assert r.makespan_ns == 360 * US
    assert [s["replayed_ns"] for s in r.steps] == [180 * US, 210 * US]
    assert r.recovered_total_ns == (270 - 360) * US == sum(r.recovered_ns.values())
    # latencies of the four batches: 120, 180, 150, 210 → mean 165 µs
    assert r.latency["mean_ns"] == 165 * US
    ev = TraceStore.open(r.out).events().filter(pl.col("is_device")).collect()
    assert int((ev["ts_ns"] + ev["dur_ns"]).max() - ev["ts_ns"].min()) == r.makespan_ns


def test_sample_makespan_is_the_replayed_stores_span_and_every_cause_keeps_32_devices(root):
    store = sample_store("coupled", root)
    r = replay_store(store.path, "asap", out=root / "asap-span.store", overwrite=True)
    ev = TraceStore.open(r.out).events().filter(pl.col("is_device")).collect()
    span = int((ev["ts_ns"] + ev["dur_ns"]).max() - ev["ts_ns"].min())
    assert abs(span - r.makespan_ns) <= 0.005 * r.makespan_ns
    assert [c["cause"] for c in r.counterfactuals] == [
        "split_cost",
        "barrier_wait_removed",
        "overlap_gained",
        "launch_overhead_removed",
    ]
    assert all(c["deployment"]["devices"] == 32 for c in r.counterfactuals)
    assert sum(r.recovered_ns.values()) == r.reference_makespan_ns - r.makespan_ns


def test_a_device_total_change_is_its_own_last_cause(root):
    store = sample_store("coupled", root)
    r = replay_store(store.path, "asap", params={"attention": "8x4", "experts": 32})
    assert [c["deployment"]["devices"] for c in r.counterfactuals][:-1] == [32] * 4
    assert r.counterfactuals[-1]["cause"] == "device_total_changed"
    assert r.counterfactuals[-1]["deployment"]["devices"] == 64


def test_a_one_rank_store_says_in_one_line_why_asap_does_not_apply(tmp_path):
    t = RankTrace(0, 1, 0)
    for layer in range(2):
        t.kernel(ATTENTION, 200 * layer, 100, stream=COMPUTE_STREAM, launch_at=200 * layer - 5)
        t.kernel(MOE, 200 * layer + 100, 50, stream=COMPUTE_STREAM, launch_at=200 * layer - 4)
        t.annotation(f"layer#{layer}", 200 * layer - 6, 4, {"step": 0, "layer": layer})
    t.annotation("prefill_step#0", -10, 500, {"step": 0, "dp_group": 0})
    store = enrich_store(ingest(write_traces(tmp_path / "t", [t]), tmp_path / "s"))
    with pytest.raises(UsageError, match="asap does not apply: the store has 1 device"):
        replay_store(store.path, "asap")
    res = run_cli("replay", store.path, "--policy", "asap")
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1 and "does not apply" in res.stderr


def test_split_auto_lists_every_split_of_32_devices_and_picks_one_no_slower_than_4x4(root):
    store = sample_store("coupled", root)
    r = replay_store(store.path, "asap", split="auto", attribute=False)
    assert len(r.splits) >= 4
    assert all(s["deployment"]["devices"] == 32 for s in r.splits)
    best = [s for s in r.splits if s["best"]]
    assert len(best) == 1 and best[0]["makespan_ns"] == min(s["makespan_ns"] for s in r.splits)
    four = next(s for s in r.splits if s["attention"] == "4x4")
    assert best[0]["makespan_ns"] <= four["makespan_ns"]
    assert r.makespan_ns == best[0]["makespan_ns"]  # the replay reported is the best split's
    j = r.to_json()
    assert {"deployment", "makespan_ns"} <= set(j["splits"][0])


def test_split_auto_for_afd_pingpong_goes_over_m_too(root):
    store = sample_store("coupled", root)
    r = replay_store(store.path, "afd-pingpong", split="auto", attribute=False)
    assert len({s["m"] for s in r.splits}) >= 2 and len({s["attention"] for s in r.splits}) >= 4


def test_a_store_whose_costs_cannot_be_fitted_warns(tmp_path):
    from tests._analysis_helpers import moe_scenario

    store = enrich_store(ingest(write_traces(tmp_path / "t", moe_scenario()), tmp_path / "s"))
    r = replay_store(store.path, "asap", params={"attention": "2x2", "experts": 4})
    assert {q["status"] for q in r.cost_fit.values()} == {"default"}
    assert any("kept the paper's defaults" in w and "attention" in w for w in r.warnings)
    res = run_cli("replay", store.path, "--policy", "asap", "--attention", "2x2", "--experts", "4")
    assert res.code == 0 and "warning: cost part attention kept the paper's defaults" in " ".join(
        res.stderr.split()
    )
    assert "Cost fit" in res.stdout and "default" in res.stdout


def test_save_costs_keeps_the_fit_quality_and_costs_reads_it_back(root, tmp_path):
    store = sample_store("coupled", root)
    path = tmp_path / "c.toml"
    res = run_cli("replay", store.path, "--policy", "asap", "--save-costs", path)
    assert res.code == 0
    again = replay_store(store.path, "asap", costs=path, attribute=False)
    first = replay_store(store.path, "asap", attribute=False)
    assert again.cost_fit["attention"]["r2"] == first.cost_fit["attention"]["r2"]
    assert again.cost_fit["moe"]["status"] == "fitted"


@pytest.mark.parametrize(
    "spec", ["k_s=1,2", "moe_e_ref=0,32", "phi=0,0.5", "scale=0.5,2", "costs=fitted,default"]
)
def test_vary_gives_the_recovered_time_per_value_and_a_tornado(root, spec):
    store = sample_store("coupled", root)
    r = replay_store(store.path, "asap", vary=[spec], attribute=False)
    knob = spec.split("=")[0]
    assert [v["knob"] for v in r.vary] == [knob, knob] and r.tornado[0]["knob"] == knob
    for v in r.vary:
        assert v["recovered_ns"] == v["reference_ns"] - v["makespan_ns"]
    if knob == "scale":  # cheaper modelled pool/transfer costs can only recover more
        lo, hi = r.vary
        assert lo["recovered_ns"] > hi["recovered_ns"]


def test_vary_rejects_an_unknown_knob_in_one_line(root):
    store = sample_store("coupled", root)
    res = run_cli("replay", store.path, "--vary", "gpu=1,2")
    assert res.code == 2 and "not one the replay varies" in res.stderr


def test_the_fit_band_brackets_the_answer(root):
    r = replay_store(sample_store("coupled", root).path, "asap")
    b = r.band
    assert b["status"] == "fitted"
    assert b["recovered_low_ns"] <= r.recovered_total_ns <= b["recovered_high_ns"]


def test_afd_pingpong_has_a_band_a_k_s_range_and_reads_as_its_split(root):
    """Issue 26 item 6: its range has width and its deployment reads D×T + E (not "groups 1, tp 20")."""
    from asaptrace.views.replay import deployment_text

    store = sample_store("coupled", root)
    params = {"attention": "5x4", "experts": 12, "m": 6}
    r = replay_store(store.path, "afd-pingpong", params=params, vary=["k_s=1,2"], attribute=False)
    # the fit band scales its modelled pool and transfer costs: dearer costs, a longer makespan
    assert (
        r.band["status"] == "fitted"
        and r.band["makespan_low_ns"] < r.makespan_ns < r.band["makespan_high_ns"]
    )
    # a coupled store's measured collectives are synchronous: at k_s 2 the ping-pong's
    # asynchronous sends cost half of them, so the what-if recovers more
    k1, k2 = r.vary
    assert k2["recovered_ns"] > k1["recovered_ns"] and k1["makespan_ns"] == r.makespan_ns
    dep = r.to_json()["deployment"]
    assert (dep["groups"], dep["tp"], dep["experts"], dep["devices"]) == (5, 4, 12, 32)
    assert deployment_text(dep) == "5×4 attention + 12 expert dies (32 devices)"


def test_attention_cost_scales_with_tp_in_the_offline_what_if(root):
    # one rule (DOMAIN §7): measured attention × T_measured / T
    store = sample_store("coupled", root)
    wl = extract_measured_work(store)
    m = fit_costs(wl).model
    a4 = item_costs(wl, m, tp=4, experts=16)["attention_ns"].to_numpy()
    a8 = item_costs(wl, m, tp=8, experts=16)["attention_ns"].to_numpy()
    assert np.abs(a4 - 2 * a8).max() <= 1


def test_exploring_picks_the_split_then_varies_at_it_and_writes_nothing(root):
    """``explore_whatif`` (what ``replay --split auto --vary`` runs before the replay itself) returns
    the best split's parameters and each --vary row replayed *at that split*: varying k_s to the
    model's own value must give back exactly the best split's makespan. The pipeline writes; the
    exploration leaves the store's folder as it was."""
    from asaptrace.replay.whatif.explore import Exploration, explore_whatif
    from asaptrace.replay.whatif.run import resolve_costs

    store = sample_store("coupled", root)
    before = sorted(p.name for p in store.path.parent.iterdir())
    wl = extract_measured_work(store, prefill_only=True)
    model = resolve_costs(wl, None).model
    own = repr(model.coupled_k_s)
    asked = policy_of("asap")
    found = explore_whatif(wl, asked, costs=model, split="auto", specs=[("k_s", [own, "2"])])
    assert isinstance(found, Exploration)
    best = next(s for s in found.splits if s["best"])
    assert (found.params["attention"], found.params["experts"]) == (best["attention"], best["experts"])
    assert found.policy == replace(asked, attention=best["attention"], experts=best["experts"])
    assert [v["value"] for v in found.vary] == [own, "2"] and found.tornado[0]["knob"] == "k_s"
    assert found.vary[0]["makespan_ns"] == best["makespan_ns"]
    assert sorted(p.name for p in store.path.parent.iterdir()) == before


def test_the_policy_is_built_once_and_passed_down(root, monkeypatch):
    """``replay --vary`` builds its policy once from the spec and its settings: the --vary rows and
    the replay take that object (no second build from a (name, dict) pair), and its JSON still
    says its name and settings."""
    import asaptrace.replay.policies as policies
    from asaptrace.replay.whatif import run

    built = []

    def counted(spec, params=None):
        built.append(spec)
        return policy_of(spec, params)

    monkeypatch.setattr(policies, "policy_of", counted)
    monkeypatch.setattr(run, "policy_of", counted)
    store = sample_store("coupled", root)
    r = replay_store(store.path, "coupled", params={"k_s": 0.5}, vary=["k_s=1,2"], attribute=False)
    assert built == ["coupled"]
    assert r.policy == "coupled" and r.params["k_s"] == 0.5
    assert [v["value"] for v in r.vary] == ["1", "2"]


def test_replay_set_is_the_schema_and_the_old_flags_its_aliases(root):
    store = sample_store("coupled", root)
    by_flags = run_cli("replay", store.path, "--policy", "chunked", "--chunk-tokens", "4096", "--json")
    by_set = run_cli(
        "replay", store.path, "--policy", "chunked", "--set", "chunked.chunk_tokens=4096", "--json"
    )
    assert by_flags.code == by_set.code == 0, by_set.stderr
    a, b = json.loads(by_flags.stdout), json.loads(by_set.stdout)
    assert a["params"] == b["params"] and a["params"]["chunk_tokens"] == 4096  # parsed by the field's type
    assert a["makespan_ns"] == b["makespan_ns"]
    # a setting of another policy, an unknown one, a bad value: one line each, exit 2
    for item, says in [
        ("chunked.m=2", "policy 'chunked' has no setting 'm'"),
        ("afd-pingpong.m=2", "'afd-pingpong.m' is a setting of afd-pingpong, not of chunked"),
        ("chunk_tokens=big", "chunked setting chunk_tokens is a whole number, not 'big'"),
    ]:
        bad = run_cli("replay", store.path, "--policy", "chunked", "--set", item)
        assert bad.code == 2 and len(bad.stderr.strip().splitlines()) == 1 and says in bad.stderr, bad.stderr
