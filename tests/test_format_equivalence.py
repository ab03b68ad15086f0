"""The same synthetic run written as Kineto and as Ascend timelines gets the same diagnosis.

Nothing downstream may know which profiler a rank came from: same barrier waits at every
(step, layer, micro-batch, op, rank), same per-group and per-rank roll-ups, same stragglers, same
Σs² imbalance, same clock offsets. The two writers follow their platforms' kernel conventions
(DeepEP's separate notify/layout kernels vs Ascend's fused MoeDistributeDispatch; device-side
annotation spans only on GPUs), so step spans — and hence wait *shares* — may differ by a few
hundredths of a percent; those are compared with a tolerance.
"""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import diagnose_store
from asaptrace.synth import load_config, synthesize


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("equiv")
    synthesize(load_config("coupled-ascend", seed=11, steps=1, fmt="both"), root / "run")
    diags = {}
    for fmt in ("kineto", "ascend"):
        store = ingest_paths([root / "run" / fmt], root / f"{fmt}.store")
        from asaptrace.pipeline import enrich_store

        diags[fmt] = diagnose_store(enrich_store(store))
    return diags


def _same(a: pl.DataFrame, b: pl.DataFrame, key: list[str], cols: list[str]) -> None:
    a = a.select(*key, *cols).sort(key)
    b = b.select(*key, *cols).sort(key)
    assert a.height == b.height > 0
    assert a.equals(b), (a, b)


def test_same_waits_at_every_instance(both):
    k, a = both["kineto"].tables, both["ascend"].tables
    # the op label of a plain collective is its kernel name (NCCL vs HCCL), so match on the instance
    _same(
        k["barrier_instances"],
        a["barrier_instances"],
        ["instance", "rank"],
        [
            "step",
            "layer",
            "micro_batch",
            "kind",
            "dp_group",
            "arrival_ns",
            "release_ns",
            "wait_ns",
            "transfer_ns",
            "last_rank",
        ],
    )


def test_same_rollups_and_imbalance(both):
    k, a = both["kineto"].tables, both["ascend"].tables
    _same(k["barrier_by_rank"], a["barrier_by_rank"], ["rank"], ["dp_group", "wait_ns"])
    shares = k["barrier_by_rank"].join(a["barrier_by_rank"], on="rank", suffix="_a")
    assert ((shares["wait_share"] - shares["wait_share_a"]).abs() < 1e-3).all()
    _same(
        k["barrier_by_group"],
        a["barrier_by_group"],
        ["dp_group"],
        ["mean_wait_ns", "last_share", "imposed_wait_ns"],
    )
    _same(k["imbalance_by_step"], a["imbalance_by_step"], ["step"], ["tokens_ratio", "sum_sq_ratio"])
    _same(k["clock"], a["clock"], ["rank"], ["offset_ns"])


def test_same_stragglers(both):
    k, a = both["kineto"].tables, both["ascend"].tables
    _same(k["stragglers"], a["stragglers"], ["rank"], ["dp_group", "last_share", "cause"])
