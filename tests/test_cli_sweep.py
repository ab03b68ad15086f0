"""`asaptrace sweep` as a user runs it: the JSON object, the results file, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asaptrace.replay.policies import POLICIES
from tests._cli import run_cli

MOONCAKE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "workloads"
    / "mooncake_conversation_trace.jsonl"
)
QUICK = ["--duration", "20s", "--rates", "1,4,16", "--jobs", "1"]


def test_json_holds_the_documented_keys_and_matches_the_results_file(tmp_path):
    out = tmp_path / "sweep.json"
    r = run_cli("sweep", *QUICK, "--policies", "default,asap", "--json", "-o", out)
    assert r.code == 0, r.stderr
    res = json.loads(r.stdout)
    assert set(res["slo_rps"]) == {"default", "asap"}
    for curve in res["curves"].values():
        for point in curve:
            assert {"rate", "mean_ttft_ns", "p50_ttft_ns", "p99_ttft_ns"} <= set(point)
            assert point["p50_ttft_ns"] <= point["p99_ttft_ns"]
    assert res["knobs"]["duration_s"] == 20.0 and res["knobs"]["coupled_k_s"] == 1.0
    assert json.loads(out.read_text()) == res


def test_tables_name_the_knobs_and_print_the_papers_numbers_beside_ours():
    r = run_cli("sweep", *QUICK, "--vary", "k_s=1,2")
    assert r.code == 0, r.stderr
    assert "knobs assumed: k_s 1, E_ref 32" in r.stdout
    assert "quantiles q10" in r.stdout  # the fitted lengths are printed
    assert "2.94×" in r.stdout  # the paper's ASAP/Default ratio, beside ours
    assert "Sensitivity (one knob at a time)" in r.stdout and "Tornado" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "k_z=1"], "unknown knob or setting 'k_z'"),
        (["--set", "layers=many"], "knob layers is a number"),
        (["--rates", "1,x"], "--rates takes 'auto' or numbers"),
        (["--duration", "five minutes"], "--duration takes a duration"),
        (["--policies", "default,magic"], "unknown policy 'magic'"),
        (["--vary", "k_s"], "--vary takes KNOB=V1,V2"),
        (["--calibrate-ttft", "asap=fast"], "--calibrate-ttft takes POLICY=MS@RATE"),
        (["--scenario", "nope"], "unknown scenario 'nope'"),
        (["--costs", "/nonexistent/costs.toml"], "cannot read cost file"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(args, message):
    r = run_cli("sweep", *QUICK, *args)
    assert r.code == 2
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_calibration_reports_the_scale_it_used():
    r = run_cli("sweep", *QUICK, "--policies", "default,asap", "--calibrate-ttft", "asap=350@1", "--json")
    assert r.code == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["calibration"]["policy"] == "asap"
    assert res["knobs"]["cost_scale"] == res["calibration"]["cost_scale"] < 1
    assert abs(res["mean_ttft_ns_at_1rps"]["asap"] / 350e6 - 1) < 0.01


@pytest.mark.skipif(not MOONCAKE.is_file(), reason="needs ../shared/data/workloads (Mooncake trace)")
def test_mooncake_prefix_cache_hits_make_ttft_shorter():
    base = ["sweep", "--workload", MOONCAKE, "--duration", "60s", "--rates", "2", "--jobs", "1", "--json"]
    cold = json.loads(run_cli(*base).stdout)
    warm = json.loads(run_cli(*base, "--set", "prefix_cache=true").stdout)
    for p in ("coupled", "chunked", "asap"):
        assert warm["curves"][p][0]["n_requests"] == cold["curves"][p][0]["n_requests"]
        assert warm["mean_ttft_ns_at_1rps"][p] < cold["mean_ttft_ns_at_1rps"][p]


def test_poisson_lengths_from_a_synth_profile():
    r = run_cli("sweep", *QUICK, "--policies", "default", "--lengths", "production", "--json")
    assert r.code == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["workload"] == "poisson, lengths production" and res["lengths_fit"] is None
    bad = run_cli("sweep", *QUICK, "--lengths", "nope")
    assert bad.code == 2 and "unknown length profile 'nope'" in bad.stderr


def _batches_store(path, arrival):
    import pyarrow as pa

    from asaptrace.store import StoreWriter

    n = len(arrival)
    table = pa.table(
        {
            "step": pa.array([0] * n, pa.int32()),
            "dp_group": pa.array([0] * n, pa.int32()),
            "micro_batch": pa.array([0] * n, pa.int8()),
            "request_id": [f"r{i}" for i in range(n)],
            "seq_len": pa.array([3000] * n, pa.int64()),
            "cached_len": pa.array([0] * n, pa.int64()),
            "arrival_ns": pa.array(arrival, pa.int64()),
        }
    )
    with StoreWriter(path) as w:
        w.write_table("batches", table)
        w.commit({})
    return path


def test_a_stores_batches_are_a_workload(tmp_path):
    # 41 requests one second apart. Replayed as they are, at 2/s they would be a 20-second burst;
    # as a steady state (DOMAIN §8) they are resampled: 40 s at 1/s is 40 arrivals, extended to
    # 2,000 at both rates. Their inter-arrival shape (all gaps 1 s: 40 gaps ≥ 2 per DP group of 8)
    # is kept, rescaled: at 2/s arrivals are 0.5 s apart, the last at 1,000 s
    store = _batches_store(tmp_path / "s.store", [i * 10**9 for i in range(41)])
    r = run_cli(
        "sweep", "--workload", store, "--duration", "40s", "--rates", "1,2", "--policies", "default", "--json"
    )
    assert r.code == 0, r.stderr
    j = json.loads(r.stdout)
    curve = {p["rate"]: p for p in j["curves"]["default"]}
    assert curve[1.0]["n_requests"] == 2000 and curve[2.0]["n_requests"] == 2000
    assert curve[2.0]["arrivals_end_ns"] == 1000 * 10**9 and j["min_arrivals"] == 2000
    assert "41 requests' lengths resampled, their inter-arrival shape rescaled" in j["workload"]
    # a store whose requests have no arrival times: their lengths resampled, Poisson arrivals
    bad = _batches_store(tmp_path / "b.store", [0, None])
    r = run_cli("sweep", "--workload", bad, "--rates", "1", "--policies", "default", "--json")
    assert r.code == 0 and "Poisson arrivals" in json.loads(r.stdout)["workload"]


SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "coupled" / "kineto"


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="needs sample_traces/coupled")
def test_sweep_runs_on_the_costs_replay_fitted_to_a_store(tmp_path):
    import tomllib

    store, fitted = tmp_path / "c.store", tmp_path / "fit.toml"
    assert run_cli("ingest", SAMPLE, "-o", store).code == 0
    assert run_cli("replay", store, "--policy", "coupled", "--save-costs", fitted).code == 0
    r = run_cli("sweep", *QUICK, "--costs", fitted, "--json")
    assert r.code == 0, r.stderr
    knobs, fit = json.loads(r.stdout)["knobs"], tomllib.loads(fitted.read_text())
    assert knobs["attn_c1_ms"] == fit["attention"]["c1_ms"] and knobs["moe_b_ms"] == fit["moe"]["b_ms"]
    assert knobs["cost_source"] == "file fit.toml"
    res = json.loads(r.stdout)
    assert res["cost_fit"] == fit["fit"]  # the [fit] tables replay wrote, carried to the results
    assert res["costs_from"].startswith("the costs in fit.toml (fitted to ")


def test_a_cost_file_is_named_and_its_fit_warnings_printed(tmp_path):
    from tests.test_replay_sweep import FIT_FILE

    f = tmp_path / "fit.toml"
    f.write_text(FIT_FILE)
    r = run_cli("sweep", *QUICK, "--policies", "default", "--costs", f)
    assert r.code == 0, r.stderr
    assert "costs: the costs in fit.toml (fitted to /data/run7.store" in " ".join(r.stdout.split())
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: cost part moe fits poorly (R² 0.55 < 0.8, residual p95 40% over 120 points): what-ifs "
        "that rescale it are uncertain",
        "warning: cost part transfer kept the paper's defaults: the store has no dispatch/combine",
    ]


def test_the_policy_registry_is_one_list_for_replay_and_sweep():
    r = run_cli("policies", "--json")
    assert r.code == 0, r.stderr
    by = {p["name"]: p for p in json.loads(r.stdout)["policies"]}
    assert set(by) == set(POLICIES.names())  # the built-ins are the registry's, whatever their number
    assert all(by[p]["online"] == POLICIES.get(p).online() for p in by)
    assert by["asap"]["variants"]["asap-no-dual-batch"] == {"dual_batch": False}
    assert by["afd-pingpong"]["variants"]["afd-pingpong-m4"] == {"m": 4}
    assert by["chunked"]["params"]["chunk_tokens"] == 8192
    # a name the registry does not know: one line naming what the sweep serves, exit 2
    bad = run_cli("sweep", *QUICK, "--policies", "coupled,afd")
    assert bad.code == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "unknown policy 'afd'" in bad.stderr and "afd-pingpong-m4" in bad.stderr
