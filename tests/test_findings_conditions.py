"""Stock sentences of the findings appear only when their numbers say them; severity follows cost;
a store without attention kernels analysed with a batches sidecar does not crash."""

from __future__ import annotations

import json

import polars as pl
import pytest

from asaptrace.analyze.findings import _imbalance_findings, _ttft_findings, cost_severity
from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import diagnose_store


def _buckets(shares: list[float]) -> dict[str, pl.DataFrame]:
    labels = ["<1K", "1K-4K", ">=16K"][: len(shares)]
    return {
        "ttft_by_bucket": pl.DataFrame(
            {
                "bucket": labels,
                "mean_seq_len": [500.0, 2000.0, 20000.0][: len(shares)],
                "wait_share": shares,
                "mean_ttft_ns": [None] * len(shares),
            },
            schema_overrides={"mean_ttft_ns": pl.Int64},
        )
    }


@pytest.mark.parametrize(
    ("shares", "opening"),
    [
        ([0.40, 0.30, 0.20], "Short requests pay for the barrier: <1K requests spend 40%"),
        ([0.22, 0.22, 0.21], "Requests of every length wait about the same share"),
        ([0.10, 0.15, 0.30], "Long requests wait a larger share of their step than short ones"),
    ],
)
def test_short_requests_pay_only_when_they_do(shares, opening):
    (f,) = _ttft_findings(_buckets(shares))
    assert f.text.startswith(opening), f.text


def _imbalance(tokens_ratio: float, sum_sq_ratio: float) -> dict[str, pl.DataFrame]:
    return {
        "imbalance_by_step": pl.DataFrame(
            {
                "step": [0],
                "tokens_ratio": [tokens_ratio],
                "sum_sq_ratio": [sum_sq_ratio],
                "attention_ratio": [None],
            },
            schema_overrides={"attention_ratio": pl.Float64},
        ),
        "imbalance_fit": pl.DataFrame(
            {"cost_basis": ["seq_lens"], "r2": [None], "explained_wait_share": [None], "wait_r2": [None]},
            schema_overrides={"r2": pl.Float64, "explained_wait_share": pl.Float64, "wait_r2": pl.Float64},
        ),
        "barrier_by_step": pl.DataFrame({"exposed_wait_ns": [1_000_000]}),
    }


@pytest.mark.parametrize(
    ("tokens", "sum_sq", "says_balanced"),
    [
        (1.01, 2.20, True),  # the sample's case: tokens balanced, Σs² not
        (1.60, 2.20, False),  # tokens are unbalanced too
        (1.01, 1.05, False),  # Σs² is balanced as well: nothing to say
    ],
)
def test_balanced_tokens_sentence_only_when_tokens_are_balanced_and_sum_sq_is_not(
    tokens, sum_sq, says_balanced
):
    (f,) = _imbalance_findings(_imbalance(tokens, sum_sq), 4, coupled=True)
    assert ("Balanced token counts do not balance the barrier." in f.text) == says_balanced
    # no attention kernels measured: the clause is left out, never a None or a '?'
    assert "measured attention" not in f.text and "?" not in f.text and "None" not in f.text


@pytest.mark.parametrize(
    ("cost", "step", "severity"),
    [
        (0, 1_000, "info"),  # nothing at stake is never high
        (0, 0, "info"),
        (10, 1_000, "low"),  # 1 %
        (30, 1_000, "medium"),  # 3 %
        (100, 1_000, "high"),  # 10 %
        (5, 0, "low"),  # no step time known: something at stake, no share
    ],
)
def test_severity_is_a_function_of_the_cost_at_stake(cost, step, severity):
    assert cost_severity(cost, step) == severity


@pytest.mark.parametrize(
    ("folder", "pattern"),
    [("kineto-dlrm-8rank", "*.pt.trace.json"), ("nsys-sample", "*.sqlite")],
)
def test_batches_on_a_store_without_attention_kernels(shared_data, tmp_path, folder, pattern):
    paths = sorted((shared_data / "traces" / folder).glob(pattern))
    store = ingest_paths(paths, tmp_path / "s", jobs=1)
    sidecar = tmp_path / "b.jsonl"
    lines = [
        {"step": 0, "dp_group": 0, "seq_lens": [100, 200]},
        {"step": 0, "dp_group": 1, "seq_lens": [300]},
    ]
    sidecar.write_text("".join(json.dumps(x) + "\n" for x in lines))
    diag = diagnose_store(store, batches=sidecar)
    assert all("?" not in f.text for f in diag.findings)
    # the store's ranks belong to no DP group, so the sidecar's groups are no load of this run: said
    assert any("DP groups 0, 1 that no rank of the store belongs to" in n for n in diag.notes)
    assert diag.tables["imbalance_by_group"].height == 0
