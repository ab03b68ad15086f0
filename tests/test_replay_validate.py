"""`asaptrace validate` on the bundled pair, the model's own error, and answers that never drift.

sample_traces/coupled and sample_traces/disaggregated are the same requests (same seed, same step
size) run coupled (DP8×TP4, EP32) and disaggregated (4×4 + 16): each predicts the other.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from tests._cli import run_cli
from tests._replay_helpers import sample_store


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    return {n: sample_store(n, root).path for n in ("coupled", "disaggregated")}


def device_span(path) -> int:
    """The run's makespan read off its events directly: first device start → last device end in steps."""
    ev = pl.scan_parquet(f"{path}/events/**/*.parquet").filter(
        pl.col("is_device") & pl.col("step").is_not_null()
    )
    ev = ev.filter(pl.col("kind").cast(pl.String) != "annotation")
    r = ev.select(pl.col("ts_ns").min().alias("a"), (pl.col("ts_ns") + pl.col("dur_ns")).max().alias("b"))
    r = r.collect().row(0)
    return r[1] - r[0]


@pytest.mark.parametrize("a, b", [("coupled", "disaggregated"), ("disaggregated", "coupled")])
def test_validate_reports_error_band_and_coverage_per_step_and_overall(stores, a, b):
    r = run_cli("validate", stores[a], stores[b], "--json")
    assert r.code == 0, r.stderr
    j = json.loads(r.stdout)
    o = j["overall"]
    assert o["measured_ns"] == device_span(stores[b])
    assert o["error"] == pytest.approx(
        (o["predicted_ns"] - o["measured_ns"]) / o["measured_ns"] * 100, abs=1e-3
    )
    assert o["covered"] == (o["band"]["mc_low_ns"] <= o["measured_ns"] <= o["band"]["mc_high_ns"])
    assert j["deployment"]["kind"] == ("disaggregated" if b == "disaggregated" else "coupled")
    assert [s["step"] for s in j["steps"]] == [0, 1]
    for s in j["steps"]:
        assert {"error", "band", "covered"} <= set(s)
        assert s["covered"] == (s["band"]["mc_low_ns"] <= s["measured_ns"] <= s["band"]["mc_high_ns"])
    assert len(j["layers"]) == 61
    assert j["model_error"]["error"] is not None


def test_coupled_predicts_the_disaggregated_run_within_5pct(stores):
    o = json.loads(run_cli("validate", stores["coupled"], stores["disaggregated"], "--json").stdout)[
        "overall"
    ]
    assert abs(o["error"]) < 5


def test_validate_prints_the_answer_in_words(stores):
    r = run_cli("validate", stores["coupled"], stores["disaggregated"])
    assert r.code == 0
    assert "covers the measured value" in r.text and "how far this model was" in r.text


def test_validate_names_a_bad_store_in_one_line(stores, tmp_path):
    r = run_cli("validate", stores["coupled"], tmp_path / "nope.store")
    assert r.code != 0 and "nope.store" in r.stderr and "Traceback" not in r.stderr


def _without_wall_time(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if '"seconds"' not in line)


@pytest.mark.parametrize("command", ["replay", "advise"])
def test_one_store_gives_byte_identical_json(stores, command):
    first = run_cli(command, stores["coupled"], "--json")
    second = run_cli(command, stores["coupled"], "--json")
    assert first.code == 0, first.stderr
    assert _without_wall_time(first.stdout) == _without_wall_time(second.stdout)


def test_replay_carries_the_mc_band_and_the_models_own_error(stores):
    j = json.loads(run_cli("replay", stores["coupled"], "--policy", "asap", "--json").stdout)
    b = j["band"]
    assert b["mc_status"] == "drawn" and b["mc_low_ns"] <= b["mc_high_ns"]
    assert j["model_error"]["measured_ns"] == device_span(stores["coupled"])
    assert j["cost_fit"]["moe"]["sigma"] > 0
