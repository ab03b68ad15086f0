"""The cost model: DOMAIN §3/§6 defaults worked by hand, causal chunking, strict TOML, fitting."""

from __future__ import annotations

import numpy as np
import pytest

from asaptrace.errors import UsageError
from asaptrace.replay.costs import CostModel, fit_costs, load_costs, save_costs
from asaptrace.replay.policies.chunked import chunk_pieces
from asaptrace.replay.whatif.measured import extract_measured_work
from tests._replay_helpers import sample_store


def test_default_attention_of_one_request():
    # 4K = 4,096 tokens (1K = 1,024): 1.41·4 + 0.0215·4² = 5.64 + 0.344 = 5.984 ms (DOMAIN §3: ≈ 6 ms)
    assert CostModel().attention_ns([4096]) == 5_984_000
    # 32K = 32,768: 1.41·32 + 0.0215·32² = 45.12 + 22.016 = 67.136 ms (DOMAIN §3: ≈ 67 ms)
    assert CostModel().attention_ns([32_768]) == 67_136_000
    # 32,000 tokens are 31.25K, not 32K: 1.41·31.25 + 0.0215·31.25² = 44.0625 + 20.99609375 ms
    assert CostModel().attention_ns([32_000]) == 65_058_594


def test_attention_scales_linearly_with_tp():
    # the constants hold for TP=4 (attn_tp_ref); on TP=8 the same batch takes half, on TP=2 twice
    m = CostModel()
    assert m.attention_ns([4096], tp=8) == 5_984_000 // 2
    assert m.attention_ns([4096], tp=2) == 2 * 5_984_000
    assert m.attention_sums_ns([4096], [4096**2], [1], tp=8).tolist() == [2_992_000]


def test_cached_prefix_pays_only_the_causal_part():
    # 1K new tokens after an 8K prefix: 1.41·1 + 0.0215·1·(2·8 + 1) = 1.41 + 0.3655 = 1.7755 ms
    assert CostModel().attention_ns([1024], [8192]) == 1_775_500


def test_chunking_a_prompt_keeps_its_total_quadratic_cost():
    quad_only = CostModel(attn_c0_ms=0, attn_c1_ms=0, attn_c2_ms=1.0)
    pieces = chunk_pieces([32_000], [0], 8_000)
    # four sub-steps of 8K: (8K, 0), (8K, 8K), (8K, 16K), (8K, 24K); Σ c(2P + c) = 32K²
    assert pieces == [[(8000, 0)], [(8000, 8000)], [(8000, 16000)], [(8000, 24000)]]
    chunked = sum(quad_only.attention_ns([c], [p]) for sub in pieces for c, p in sub)
    # 32,000 tokens = 31.25K: 31.25² = 976.5625 ms
    assert chunked == quad_only.attention_ns([32_000]) == 976_562_500


def test_chunks_follow_the_budget_across_requests():
    # 5K then 6K tokens, 4K budget: [5K→4K], [1K rest, 3K of the 6K], [3K rest]
    assert chunk_pieces([5000, 6000], [0, 0], 4000) == [
        [(4000, 0)],
        [(1000, 4000), (3000, 0)],
        [(3000, 3000)],
    ]


def test_moe_plateau_linear_part_and_pool_scaling():
    m = CostModel()
    # on 32 dies (= E_ref): max(0.55, 0.23 + 0.286·1) = 0.55 ms at 1K, 0.23 + 0.286·4 = 1.374 ms at 4K
    assert m.moe_ns([1024, 4096], 32).tolist() == [550_000, 1_374_000]
    # on 16 dies r = 2: max(1.1, 0.23 + 0.572·1) = 1.1 ms; 0.23 + 0.572·4 = 2.518 ms
    assert m.moe_ns([1024, 4096], 16).tolist() == [1_100_000, 2_518_000]
    # a 1.5× skewed expert rank: 0.23 + 0.286·4·1.5 = 1.946 ms
    assert int(m.moe_ns(4096, 32, skew=1.5)) == 1_946_000


def test_transfer_is_latency_plus_tokens_over_bandwidth():
    # 2K = 2,048 tokens per die: 0.19 + 0.71·2 = 1.61 ms
    assert int(CostModel().transfer_ns(2048)) == 1_610_000


def test_toml_round_trip_and_overrides(tmp_path):
    path = tmp_path / "c.toml"
    model = CostModel(attn_c2_ms=0.03, moe_e_ref=16, launch_ms=0.1, source="x")
    save_costs(model, path, quality={"attention": {"n": 3, "r2": 0.5}})
    back = load_costs(path)
    assert back.attn_c2_ms == 0.03 and back.moe_e_ref == 16 and back.launch_ms == 0.1
    # a partial file changes only what it names
    (tmp_path / "p.toml").write_text("[transfer]\nlatency_ms = 0.5\n")
    part = load_costs(tmp_path / "p.toml")
    assert part.xfer_latency_ms == 0.5 and part.attn_c1_ms == CostModel().attn_c1_ms


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[attention]\nc3_ms = 1\n", "unknown key attention.c3_ms"),
        ("[gpu]\nx = 1\n", r"unknown section \[gpu\]"),
        ("[moe]\na_ms = 'fast'\n", "moe.a_ms must be a finite number"),
        ("[moe\n", "not valid TOML"),
    ],
)
def test_bad_cost_files_name_the_file_and_the_cause(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message) as err:
        load_costs(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_fit_recovers_the_generator_attention_constants(tmp_path_factory):
    # the coupled sample was generated with attention = 0.05 + 1.41·Σs/1K + 0.0215·Σs²/1K² ms per
    # kernel (sample_traces/coupled/config.toml [costs]), with 3 % lognormal jitter per kernel
    wl = extract_measured_work(sample_store("coupled", tmp_path_factory.mktemp("fit")))
    fit = fit_costs(wl)
    assert fit.model.attn_c1_ms == pytest.approx(1.41, rel=0.1)
    assert fit.model.attn_c2_ms == pytest.approx(0.0215, rel=0.1)
    assert fit.quality["attention"]["r2"] > 0.9 and fit.quality["attention"]["n"] > 100
    assert fit.model.source.startswith("fitted to")
    assert np.isfinite(fit.quality["moe"]["r2"])
