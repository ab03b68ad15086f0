"""Collective instances matched across ranks, on a case worked by hand.

Two ranks, one segment (step 0, layer 0). Rank 0 runs a dispatch of two kernels (DeepEP's notify
and dispatch: one arrival), a combine, a second dispatch (the op's second occurrence in the
segment), and two HCCL all-reduces whose names differ only in their per-rank suffix. Rank 1 runs
the same, with one all-reduce: the second all-reduce is rank 0's alone, an incomplete instance.
"""

from __future__ import annotations

import polars as pl

from asaptrace.enrich.instances import match_instances

# (rank, kind, name, ts_ns, dur_ns)
KERNELS = [
    (0, "dispatch", "notify_dispatch", 10, 2),
    (0, "dispatch", "dispatch", 13, 2),
    (0, "combine", "combine", 20, 5),
    (0, "dispatch", "dispatch", 30, 1),
    (0, "collective", "hcom_allReduce__360_0_1", 40, 5),
    (0, "collective", "hcom_allReduce__361_0_1", 50, 2),
    (0, "compute", "gemm", 60, 9),  # not a collective: takes no part
    (1, "dispatch", "dispatch", 11, 3),
    (1, "combine", "combine", 21, 3),
    (1, "dispatch", "dispatch", 29, 4),
    (1, "collective", "hcom_allReduce__12_0_1", 41, 3),
]


def _events() -> pl.DataFrame:
    rank, kind, name, ts, dur = zip(*KERNELS, strict=True)
    n = len(KERNELS)
    return pl.DataFrame(
        {
            "rank": rank,
            "step": [0] * n,
            "layer": [0] * n,
            "micro_batch": [None] * n,
            "is_device": [True] * n,
            "kind": kind,
            "name": name,
            "ts_ns": ts,
            "dur_ns": dur,
        },
        schema={
            "rank": pl.Int32,
            "step": pl.Int32,
            "layer": pl.Int16,
            "micro_batch": pl.Int8,
            "is_device": pl.Boolean,
            "kind": pl.String,
            "name": pl.String,
            "ts_ns": pl.Int64,
            "dur_ns": pl.Int64,
        },
    )


def test_instances_of_a_hand_worked_segment():
    got = match_instances(_events()).select(
        "instance", "op", "seq", "rank", "arrival_ns", "end_ns", "n_kernels", "n_ranks", "complete"
    )
    expected = [
        # instance, op, seq, rank, arrival, end, kernels, ranks, complete — ids by first arrival
        (0, "dispatch", 0, 0, 10, 15, 2, 2, True),
        (0, "dispatch", 0, 1, 11, 14, 1, 2, True),
        (1, "combine", 0, 0, 20, 25, 1, 2, True),
        (1, "combine", 0, 1, 21, 24, 1, 2, True),
        (2, "dispatch", 1, 0, 30, 31, 1, 2, True),
        (2, "dispatch", 1, 1, 29, 33, 1, 2, True),
        (3, "hcom_allReduce", 0, 0, 40, 45, 1, 2, True),
        (3, "hcom_allReduce", 0, 1, 41, 44, 1, 2, True),
        (4, "hcom_allReduce", 1, 0, 50, 52, 1, 1, False),
    ]
    assert got.rows() == expected


def test_instances_do_not_depend_on_the_order_of_the_rows():
    # a consistency check: the same kernels in another row order match the same instances
    events = _events()
    shuffled = events.sample(fraction=1.0, shuffle=True, seed=7)
    assert match_instances(shuffled).equals(match_instances(events))
