"""Topology: role, DP group, TP and EP index from annotations, --parallel, or the kinds a rank runs."""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.enrich.topology import ParallelConfig, assign_topology, parse_parallel
from asaptrace.errors import UsageError


def _ranks(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rank": list(range(n)),
            "role": ["unknown"] * n,
            "dp_group": [None] * n,
            "tp_index": [None] * n,
            "ep_index": [None] * n,
            "world_size": [None] * n,
        },
        schema={
            "rank": pl.Int32,
            "role": pl.String,
            "dp_group": pl.Int32,
            "tp_index": pl.Int32,
            "ep_index": pl.Int32,
            "world_size": pl.Int32,
        },
    )


def _events(kinds: dict[int, list[str]]) -> pl.DataFrame:
    rows = [{"rank": r, "is_device": True, "kind": k} for r, ks in kinds.items() for k in ks]
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "is_device": pl.Boolean, "kind": pl.String})


def test_parse_parallel():
    assert parse_parallel("dp=8,tp=4,ep=32") == ParallelConfig(dp=8, tp=4, ep=32)
    assert parse_parallel(" DP = 2 , tp=1 ") == ParallelConfig(dp=2, tp=1)
    assert parse_parallel(None) is None
    for bad, msg in (("dp=8,tp", "cannot read 'tp'"), ("dp=0", "at least 1"), ("dp=2,dp=4", "given twice")):
        with pytest.raises(UsageError, match=msg):
            parse_parallel(bad)


def test_coupled_layout_from_parallel_option():
    ranks, meta = assign_topology(_ranks(8), _events({}), parallel=ParallelConfig(dp=4, tp=2, ep=8))
    r = ranks.sort("rank")
    assert r.get_column("role").unique().to_list() == ["fused"]
    assert r.get_column("dp_group").to_list() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert r.get_column("tp_index").to_list() == [0, 1] * 4
    assert r.get_column("ep_index").to_list() == list(range(8))
    assert meta["deployment"] == "coupled" and meta["source"] == "option"


def test_disaggregated_layout_from_parallel_option():
    ranks, meta = assign_topology(_ranks(6), _events({}), parallel=ParallelConfig(dp=2, tp=2, ep=2))
    r = ranks.sort("rank")
    assert r.get_column("role").to_list() == ["attention"] * 4 + ["expert"] * 2
    assert r.get_column("dp_group").to_list() == [0, 0, 1, 1, None, None]
    assert r.get_column("ep_index").to_list() == [None] * 4 + [0, 1]
    assert meta["deployment"] == "disaggregated"


def test_parallel_option_that_does_not_fit_the_store():
    with pytest.raises(UsageError, match=r"describes 32 devices .* but the store has 8 ranks"):
        assign_topology(_ranks(8), _events({}), parallel=ParallelConfig(dp=8, tp=4, ep=32))


def test_roles_from_the_kinds_a_rank_runs():
    kinds = {0: ["attention", "moe"], 1: ["attention", "dispatch"], 2: ["moe", "combine"], 3: ["compute"]}
    annotated = pl.DataFrame(
        {"rank": [0, 1], "dp_group": [0, 0]}, schema={"rank": pl.Int32, "dp_group": pl.Int32}
    )
    ranks, meta = assign_topology(_ranks(4), _events(kinds), annotated_dp=annotated)
    r = ranks.sort("rank")
    assert r.get_column("role").to_list() == ["fused", "attention", "expert", "unknown"]
    assert r.get_column("dp_group").to_list() == [0, 0, None, None]
    assert r.get_column("tp_index").to_list() == [0, 1, None, None]  # order within the DP group
    assert r.get_column("ep_index").to_list() == [0, None, 1, None]  # order among MoE runners
    assert meta["deployment"] == "disaggregated" and meta["source"] == "inferred"


@pytest.mark.parametrize(
    ("kinds", "roles", "deployment"),
    [
        # SGLang Qwen3-8B dense decode on one GPU: attention kernels, no MoE kernel anywhere
        ({0: ["attention", "compute", "collective"]}, ["fused"], "dense"),
        # a dense model with TP over 2 GPUs
        ({0: ["attention", "compute"], 1: ["attention", "compute"]}, ["fused", "fused"], "dense"),
        # one GPU running a MoE model (Qwen3-30B-A3B on a B300)
        ({0: ["attention", "gate", "moe"]}, ["fused"], "single-device"),
        # a coupled EP run where one rank's MoE kernels were not seen: still no expert-only rank
        ({0: ["attention", "moe"], 1: ["attention"]}, ["fused", "fused"], "coupled"),
        # an expert-only rank without any attention-only rank is no ASAP split either
        ({0: ["attention", "moe"], 1: ["moe"]}, ["fused", "expert"], "coupled"),
        # both sides present: the ASAP layout
        (
            {0: ["attention"], 1: ["attention"], 2: ["moe"]},
            ["attention", "attention", "expert"],
            "disaggregated",
        ),
        # a recommender model (DLRM): neither attention nor MoE
        ({0: ["compute", "collective"], 1: ["compute"]}, ["unknown", "unknown"], "unknown"),
    ],
)
def test_disaggregated_only_with_attention_only_and_expert_only_ranks(kinds, roles, deployment):
    ranks, meta = assign_topology(_ranks(len(kinds)), _events(kinds))
    assert ranks.sort("rank").get_column("role").to_list() == roles
    assert meta["deployment"] == deployment


def test_ep_index_counts_only_ranks_that_run_moe():
    # rank 1 runs attention beside a MoE rank: fused (no expert-only rank), but it runs no expert,
    # so it has no EP index and the EP size is 1
    ranks, meta = assign_topology(_ranks(2), _events({0: ["attention", "moe"], 1: ["attention"]}))
    assert ranks.sort("rank").get_column("ep_index").to_list() == [0, None]
    assert meta["ep"] == 1
