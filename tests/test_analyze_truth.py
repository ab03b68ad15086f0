"""The analyses recover the generator's truth.json on every sample trace of sample_traces/, and on
the presets without a bundled sample (synthesized here with one step: DeepSeek-V3's DP4×TP8 and
the 384-rank run).

truth.json is written by `asaptrace synth` (tests only; no analysis reads it). Times there are on
the run's true clock; offsets are relative to rank 0 (its offset is 0 there as here).
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import diagnose_store, enrich_store
from asaptrace.synth import load_config, synthesize
from tests._step_invariants import step_violations
from tests.conftest import SAMPLE_RUNS

#: presets with no bundled sample: synthesized by the test, one step each
PRESETS = ("coupled-tp8", "coupled-384")
RUNS = [*SAMPLE_RUNS, *PRESETS]
COUPLED = ["coupled", "coupled-hot-expert", "coupled-ascend", *PRESETS]


@pytest.fixture(scope="module")
def run(sample_run, tmp_path_factory):
    """``get(name) -> (truth, store, diagnosis)``: a bundled sample, or a preset synthesized here."""
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in PRESETS:
            return sample_run(name)
        if name not in cache:
            root = tmp_path_factory.mktemp(name)
            synthesize(load_config(name, steps=1), root / "run")
            store = enrich_store(ingest_paths([root / "run" / "kineto"], root / "s"))
            truth = json.loads((root / "run" / "truth.json").read_text())
            cache[name] = (truth, store, diagnose_store(store))
        return cache[name]

    return get


@pytest.mark.parametrize("name", list(RUNS))
def test_topology_matches(run, name):
    truth, store, _ = run(name)
    ranks = store.read("ranks").sort("rank")
    expected = [(r["rank"], r["role"], r["dp_group"], r["tp_index"], r["ep_index"]) for r in truth["ranks"]]
    assert ranks.select("rank", "role", "dp_group", "tp_index", "ep_index").rows() == expected


@pytest.mark.parametrize("name", COUPLED)
def test_clock_offsets_within_two_microseconds(run, name):
    truth, store, _ = run(name)
    true = truth["clock_offsets_ns"]
    assert len(set(true)) > 1  # the run does have skewed clocks
    got = store.read("ranks").sort("rank").get_column("clock_offset_ns").to_list()
    assert max(abs(g - (t - true[0])) for g, t in zip(got, true, strict=True)) <= 2_000


def test_disaggregated_clocks_are_reported_unalignable(run):
    truth, store, diag = run("disaggregated")
    assert len(set(truth["clock_offsets_ns"])) > 1
    assert store.meta["clock"]["status"] == "impossible"  # no synchronous collective to align on
    assert store.read("ranks").get_column("clock_offset_ns").to_list() == [0] * len(truth["ranks"])
    assert any(f.code == "clock" and "could not be aligned" in f.text for f in diag.findings)


@pytest.mark.parametrize("name", list(RUNS))
def test_wait_per_rank_and_layer_within_5_percent_or_10_us(run, name):
    truth, _, diag = run(name)
    w = pl.DataFrame(truth["waits"])
    expected = (
        w.group_by("rank", "step", "layer")
        .agg(pl.col("wait_ns").sum().alias("truth"))
        .with_columns(layer=pl.when(pl.col("layer") >= 0).then(pl.col("layer")))
    )  # truth's layer −1: the step's all-gather
    got = diag.tables["barrier_by_rank_layer"].select(
        pl.col("rank").cast(pl.Int64),
        pl.col("step").cast(pl.Int64),
        pl.col("layer").cast(pl.Int64),
        "wait_ns",
    )
    joined = expected.join(got, on=["rank", "step", "layer"], how="full", nulls_equal=True, coalesce=True)
    assert joined.height == expected.height == got.height
    err = (pl.col("wait_ns") - pl.col("truth")).abs()
    bad = joined.filter(err.is_null() | ((err > 10_000) & (err > 0.05 * pl.col("truth"))))
    assert bad.height == 0, bad.head()


@pytest.mark.parametrize("name", COUPLED)
def test_sum_sq_imbalance_is_exact(run, name):
    truth, _, diag = run(name)
    steps = diag.tables["imbalance_by_step"].sort("step")
    assert steps.get_column("sum_sq_ratio").to_list() == pytest.approx(
        [s["sum_sq_imbalance"] for s in truth["steps"]], rel=2e-6
    )
    assert steps.get_column("tokens_ratio").to_list() == pytest.approx(
        [s["token_imbalance"] for s in truth["steps"]], rel=2e-6
    )
    # per group, exactly (integers) from the generator's batches: new tokens s − c, new work s² − c²
    b = pl.DataFrame(truth["batches"])
    exact = (
        b.group_by("step", "dp_group")
        .agg(
            (pl.col("seq_len") ** 2 - pl.col("cached_len") ** 2).sum().alias("sum_sq"),
            (pl.col("seq_len") - pl.col("cached_len")).sum().alias("tokens"),
        )
        .sort("step", "dp_group")
    )
    groups = diag.tables["imbalance_by_group"].sort("step", "dp_group")
    assert groups.select("sum_sq", "tokens").rows() == exact.select("sum_sq", "tokens").rows()


def test_disaggregated_sum_sq_imbalance_is_exact(run):
    truth, _, diag = run("disaggregated")
    per_step: dict[int, list[int]] = {}
    for s in truth["steps"]:
        per_step.setdefault(s["step"], []).append(sum(s["batch_sum_sq"]))
    expected = [max(v) / (sum(v) / len(v)) for _, v in sorted(per_step.items())]
    got = diag.tables["imbalance_by_step"].sort("step").get_column("sum_sq_ratio").to_list()
    assert got == pytest.approx(expected, rel=2e-6)


@pytest.mark.parametrize("name", ["coupled", "coupled-ascend", "coupled-tp8"])
def test_straggler_group_is_the_heaviest_sum_sq(run, name):
    truth, _, diag = run(name)
    heaviest = {
        s["step"]: max(range(len(s["group_sum_sq"])), key=s["group_sum_sq"].__getitem__)
        for s in truth["steps"]
    }
    groups = diag.tables["straggler_groups"]
    top = groups.row(0, named=True)
    assert set(heaviest.values()) == {top["dp_group"]}
    assert top["cause"] == "load"
    assert diag.tables["stragglers"].get_column("outlier").sum() == 0  # no device is to blame


def test_slow_device_and_hot_expert_are_named(run):
    truth, _, diag = run("coupled-hot-expert")
    s = truth["straggler"]
    st = diag.tables["stragglers"]
    flagged = dict(st.filter(pl.col("outlier")).select("rank", "cause").rows())
    assert flagged == {s["slow_rank"]: "slow_device", s["hot_expert_rank"]: "hot_expert"}
    codes = {f.code: f for f in diag.findings}
    assert f"Rank {s['slow_rank']} is a slow device" in codes["slow_device"].text
    assert f"Rank {s['hot_expert_rank']} holds a hot expert" in codes["hot_expert"].text


@pytest.mark.parametrize("name", list(RUNS))
def test_ttft_of_every_request_matches_truth(run, name):
    # synth stamps each request's arrival in the step annotations (on rank 0's clock, the one the
    # store is aligned to); truth.json's ttft_ns = end of the last device kernel of the request's
    # step on its DP group's ranks − its arrival, on the true clock. The two clocks differ by a
    # constant, so TTFT must agree to the clock alignment's error (≤ 2 µs). Where the clocks
    # cannot be aligned (the disaggregated run shares no collective across groups), a group's
    # step end stays on its ranks' own clocks: the error is then bounded by their true skew to
    # rank 0, max |offset[r] − offset[0]| over the group's ranks.
    truth, store, diag = run(name)
    offsets = truth["clock_offsets_ns"]
    aligned = store.meta["clock"]["status"] != "impossible"
    skew = {
        g: max(abs(offsets[r["rank"]] - offsets[0]) for r in truth["ranks"] if r["dp_group"] == g)
        for g in {r["dp_group"] for r in truth["ranks"] if r["dp_group"] is not None}
    }
    tb = pl.DataFrame(truth["batches"]).select("request_id", "arrival_ns", "ttft_ns")
    assert tb.get_column("ttft_ns").null_count() == 0
    assert store.meta["batches_source"] == "annotations"
    assert store.read("batches").get_column("arrival_ns").null_count() == 0
    req = diag.tables["ttft_requests"]
    assert req.height == tb.height
    assert req.get_column("ttft_ns").null_count() == 0
    got = req.join(tb, on="request_id", suffix="_truth")
    assert got.height == tb.height
    for row in got.iter_rows(named=True):
        bound = 2_000 + (0 if aligned else skew[row["dp_group"]])
        assert abs(row["ttft_ns"] - row["ttft_ns_truth"]) <= bound, row
    # arrivals on the aligned clock: the true arrival shifted by one constant for the whole run
    shift = got.get_column("arrival_ns") - got.get_column("arrival_ns_truth")
    assert shift.n_unique() == 1
    buckets = diag.tables["ttft_by_bucket"]
    assert buckets.height and buckets.get_column("mean_ttft_ns").null_count() == 0
    assert buckets.get_column("n_requests").sum() == tb.height


@pytest.mark.parametrize("name", list(RUNS))
def test_every_step_starts_at_an_annotation(run, name):
    """Each sample's and preset's steps are its ``prefill_step#N`` annotations (tests/_step_invariants.py)."""
    _, store, _ = run(name)
    assert step_violations(store) == []
