"""synth's kernels take their attention, MoE and transfer costs from the replay's one CostModel.

The constants are synth's ``[costs]`` defaults (DOMAIN.md §3): attention 0.05 + 1.41·Σc/1K +
0.0215·Σ(s² − P²)/1K² + 0.01·n ms, grouped GEMM max(0.55, 0.23 + 0.572·a/1K) ms for a
(token, expert) assignments on a device, dispatch 0.19 + 0.71·t/1K ms and combine the same with
1/0.71 × the payload (= 0.19 + 1.0·t/1K ms).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from asaptrace.errors import UsageError
from asaptrace.replay.costs import CostModel, load_costs
from asaptrace.synth import build_timeline, load_config
from asaptrace.synth.costs import cost_model, kernel_costs
from asaptrace.synth.timeline import OP_CODE
from tests._synth_helpers import tiny


def test_per_request_term_of_the_attention_model():
    # 3 requests of 1K = 1,024 new tokens, c0 = 0.05, c1 = 1.41, c2 = 0, ρ = 0.01:
    # 0.05 + 1.41·3 + 0.01·3 = 4.31 ms
    m = CostModel(attn_c0_ms=0.05, attn_c2_ms=0.0, attn_per_request_ms=0.01)
    assert m.attention_ns([1024, 1024, 1024]) == 4_310_000
    assert m.attention_sums_ns([3072], [0], [3]).tolist() == [4_310_000]
    # an empty batch pays c0 only
    assert m.attention_sums_ns([0], [0], [0]).tolist() == [50_000]


def test_per_request_term_reads_from_a_cost_file(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[attention]\nper_request_ms = 0.02\n")
    assert load_costs(path).attn_per_request_ms == 0.02


def test_synth_constants_map_onto_the_cost_model():
    kc = kernel_costs(load_config("coupled"))  # EP32, top-8
    # grouped GEMM of 2K = 2,048 assignments on a device: 0.23 + 0.572·2 = 1.374 ms; 500: plateau 0.55 ms
    loads = np.array([2048, 500] + [1024] * 30)
    moe = kc.moe_ns(loads)
    assert moe[0] == pytest.approx(1_374_000, abs=1) and moe[1] == pytest.approx(550_000, abs=1)
    # the same through CostModel's pool form: item of N = Σa / 8 tokens on 32 dies, skew = a / mean
    assert kc.model.moe_e_ref == 32 and kc.model.moe_b_ms == pytest.approx(0.572 * 8 / 32)
    # dispatch of 4K = 4,096 tokens per die: 0.19 + 0.71·4 = 3.03 ms; combine: 0.19 + 1.0·4 = 4.19 ms
    assert int(kc.transfer_ns(4096)) == 3_030_000
    assert int(kc.combine_ns(4096)) == pytest.approx(4_190_000, abs=1)
    assert cost_model(load_config("disaggregated")).moe_e_ref == 16


def test_coupled_kernels_follow_the_hand_formulas():
    cfg = tiny("coupled", run={"steps": 1})
    cfg = replace(cfg, costs=replace(cfg.costs, jitter=0.0))
    tl = build_timeline(cfg)
    batches = pl.DataFrame(tl.truth["batches"])
    # attention of one (group, micro-batch) batch at every layer, worked from its requests
    g = batches.filter((pl.col("dp_group") == 1) & (pl.col("micro_batch") == 0))
    s, p = g["seq_len"].to_numpy().astype(float), g["cached_len"].to_numpy().astype(float)
    want = 0.05 + 1.41 * (s - p).sum() / 1024 + 0.0215 * (s**2 - p**2).sum() / 1024**2 + 0.01 * len(s)
    rank = 2 * 1  # tp = 2: rank 2 is group 1's first member
    sel = (tl.k_op == OP_CODE["attention"]) & (tl.k_rank == rank) & (tl.k_mb == 0)
    assert sel.sum() == cfg.model.layers
    assert np.abs(tl.k_dur[sel] - want * 1e6).max() <= 1
    # the grouped GEMM of each device from its assignments (truth expert_loads)
    loads = tl.truth["expert_loads"]
    i = next(j for j, layer in enumerate(loads["layer"]) if layer == cfg.model.dense_layers)
    a = np.array(loads["assignments"][i], float)
    want_moe = np.maximum(0.55, 0.23 + 0.572 * a / 1024) * 1e6
    sel = (
        (tl.k_op == OP_CODE["moe"]) & (tl.k_layer == loads["layer"][i]) & (tl.k_mb == loads["micro_batch"][i])
    )
    got = tl.k_dur[sel][np.argsort(tl.k_rank[sel])]
    assert np.abs(got - want_moe).max() <= 1


def test_a_renamed_cost_key_says_its_new_name(tmp_path):
    old = tmp_path / "old.toml"
    old.write_text("[costs]\ncombine_c1 = 1.2\n")
    with pytest.raises(UsageError, match="combine_payload") as err:
        load_config(config_file=old)
    assert str(old) in str(err.value) and "\n" not in str(err.value)


def test_a_noise_seed_redraws_the_execution_not_the_requests():
    """``[run] noise_seed``: the same requests and batches under another draw of the kernel noise
    and the routing (how far one twin moves from the next: benchmarks/replay_noise_floor.py);
    −1 keeps the run of ``seed`` exactly."""
    cfg = tiny("coupled", run={"steps": 1, "seed": 4})
    cfg = replace(cfg, costs=replace(cfg.costs, jitter=0.2))
    base = build_timeline(cfg)
    same = build_timeline(replace(cfg, run=replace(cfg.run, noise_seed=-1)))
    other = build_timeline(replace(cfg, run=replace(cfg.run, noise_seed=11)))
    assert np.array_equal(base.k_dur, same.k_dur)
    requests = [k for k in base.truth["batches"] if k != "ttft_ns"]  # ttft: when the run served them
    assert requests and all(base.truth["batches"][k] == other.truth["batches"][k] for k in requests)
    attn = base.k_op == OP_CODE["attention"]
    assert attn.sum() == (other.k_op == OP_CODE["attention"]).sum()
    assert not np.array_equal(base.k_dur, other.k_dur)  # each kernel drawn again
    assert base.truth["expert_loads"]["assignments"] != other.truth["expert_loads"]["assignments"]
