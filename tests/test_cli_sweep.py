"""`asaptrace sweep` as a user runs it: the JSON object, the results file, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._cli import run_cli

MOONCAKE = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "workloads"
    / "mooncake_conversation_trace.jsonl"
)
QUICK = ["--duration", "20s", "--rates", "1,2,4", "--jobs", "1"]


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
    assert "sensitivity" in r.stdout and "tornado" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "k_z=1"], "unknown knob 'k_z'"),
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
    for p in ("default", "chunked", "asap"):
        assert warm["curves"][p][0]["n_requests"] == cold["curves"][p][0]["n_requests"]
        assert warm["mean_ttft_ns_at_1rps"][p] < cold["mean_ttft_ns_at_1rps"][p]
