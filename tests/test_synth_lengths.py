"""Shipped length profiles reproduce their sources; replayed traces give the right lengths and cache hits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asaptrace.errors import UsageError
from asaptrace.workload.derive_lengths import read_source_lengths
from asaptrace.workload.lengths import get_profile, load_profiles
from asaptrace.workload.requests import WorkloadConfig, make_requests, replay_requests
from tests._synth_helpers import WORKLOADS, need

#: Quantiles checked, and the tolerance: |sampled − source| ≤ 3 % of the source value (or 2 tokens).
#: 200 000 draws put the sampling error of these quantiles well under 1 %; the rest is the
#: linear interpolation between table points (0.5 % probability steps).
CHECKED = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
REL_TOL = 0.03


@pytest.mark.parametrize("profile", ["azure-code", "azure-conv", "mooncake-conv"])
def test_sampled_quantiles_match_the_source_trace(profile):
    need(WORKLOADS)
    source = read_source_lengths(WORKLOADS, profile)
    drawn = get_profile(profile).sample(np.random.default_rng(7), 200_000)
    want = np.quantile(source, CHECKED)
    got = np.quantile(drawn, CHECKED)
    for p, w, g in zip(CHECKED, want, got, strict=True):
        assert abs(g - w) <= max(REL_TOL * w, 2), f"{profile} p{p * 100:g}: sampled {g}, source {w}"
    assert drawn.min() >= source.min() and drawn.max() <= source.max()


def test_source_figures_quoted_in_sources_md_hold():
    # SOURCES.md: Azure code p50 ≈ 1,469, conv p50 ≈ 1,020, Mooncake p50 ≈ 6,909 (the table's anchor points)
    profiles = load_profiles()
    p = profiles["azure-code"].probabilities.index(0.5)
    assert round(profiles["azure-code"].quantiles[p]) == 1469
    assert round(profiles["azure-conv"].quantiles[p]) == 1020
    assert round(profiles["mooncake-conv"].quantiles[p]) == 6909


def test_production_profile_is_min_31_mean_5k_truncated_at_32k():
    drawn = get_profile("production").sample(np.random.default_rng(3), 400_000)
    assert drawn.min() >= 31 and drawn.min() < 60  # the lower end reaches down to the stated minimum
    assert drawn.max() == 32768  # truncated, and the truncation is hit
    assert abs(drawn.mean() - 5000) / 5000 < 0.02


def test_every_profile_names_its_source_and_licence():
    for prof in load_profiles().values():
        assert prof.source and prof.licence
    assert "CC-BY-4.0" in get_profile("azure-code").licence
    assert "Azure LLM inference trace 2023" in get_profile("azure-conv").licence
    assert get_profile("mooncake-conv").licence == "Apache-2.0"


def test_mooncake_profile_carries_prefix_cache_hits():
    prof = get_profile("mooncake-conv")
    lengths = prof.sample(np.random.default_rng(1), 10_000)
    cached = prof.sample_cached(np.random.default_rng(2), lengths)
    assert (cached < lengths).all() and (cached >= 0).all()
    assert 0.3 < (cached / lengths).mean() < 0.5  # the source trace's mean hit fraction is ≈ 0.41


def test_mooncake_replay_counts_leading_blocks_seen_before(tmp_path):
    # request 0: blocks 1,2 new → 0 cached; request 1 shares blocks 1,2 then diverges → 2 × 512 cached;
    # request 2 shares block 1 only, and block 3 was never a prefix → 512 cached;
    # request 3 is all seen blocks but only 700 tokens long → capped at 699 (one token must be computed)
    rows = [
        {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [1, 2]},
        {"timestamp": 10, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2, 4]},
        {"timestamp": 25, "input_length": 900, "output_length": 5, "hash_ids": [1, 5]},
        {"timestamp": 30, "input_length": 700, "output_length": 5, "hash_ids": [1, 2]},
    ]
    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    reqs = replay_requests(path)
    assert reqs.seq_len.tolist() == [1000, 1500, 900, 700]
    assert reqs.cached_len.tolist() == [0, 1024, 512, 699]
    assert reqs.arrival_ns.tolist() == [0, 10_000_000, 25_000_000, 30_000_000]


def test_azure_replay_reads_timestamps_and_context_tokens(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:04.0319600,3180,8\n"
        "2023-11-16 18:17:03.9799600,4808,10\n"
    )
    reqs = replay_requests(path)
    assert reqs.seq_len.tolist() == [4808, 3180]  # sorted by arrival
    assert reqs.arrival_ns.tolist() == [0, 52_000_000]  # 04.03196 − 03.97996 s
    assert reqs.cached_len.tolist() == [0, 0]


def test_bad_replay_file_is_a_one_line_user_error(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"nope": 1}\n')
    with pytest.raises(UsageError, match=r"x\.jsonl"):
        replay_requests(path)


def test_same_seed_same_requests_and_truncation():
    cfg = WorkloadConfig(profile="mooncake-conv", requests=500, max_len=32768, prefix_cache=True)
    a = make_requests(cfg, np.random.default_rng(11))
    b = make_requests(cfg, np.random.default_rng(11))
    assert a.seq_len.tolist() == b.seq_len.tolist() and a.arrival_ns.tolist() == b.arrival_ns.tolist()
    assert a.seq_len.max() <= 32768 and (a.cached_len < a.seq_len).all()
    # Poisson at 40 req/s: 499 gaps of mean 25 ms
    assert abs(a.arrival_ns[-1] / 499 - 25e6) / 25e6 < 0.15
