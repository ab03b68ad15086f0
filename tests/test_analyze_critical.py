"""The critical path on hand-worked windows: one rank on two streams, two ranks joined by a
collective, and the 20 %-faster what-if (every expected number worked out in the comments)."""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.analyze.critical import NoWindows, critical_path
from asaptrace.schema import EVENTS_SCHEMA

_SCHEMA = pl.from_arrow(EVENTS_SCHEMA.empty_table()).schema


def _events(rows: list[tuple]) -> pl.DataFrame:
    """rows: (rank, stream, is_device, kind, name, ts, dur, corr)."""
    cols = {k: [] for k in _SCHEMA}
    for eid, (rank, stream, dev, kind, name, ts, dur, corr) in enumerate(rows):
        for k, v in (
            ("rank", rank),
            ("pid", 0 if dev else 1),
            ("stream", stream),
            ("is_device", dev),
            ("kind", kind),
            ("name", name),
            ("cat", "kernel" if dev else "cuda_runtime"),
            ("ts_ns", ts),
            ("dur_ns", dur),
            ("step", 0),
            ("layer", None),
            ("micro_batch", None),
            ("corr", corr),
            ("eid", eid),
        ):
            cols[k].append(v)
    return pl.DataFrame(cols).cast({k: v for k, v in _SCHEMA.items() if k not in ("kind", "name", "cat")})


def _ranks(n: int) -> pl.DataFrame:
    return pl.DataFrame({"rank": list(range(n)), "role": ["fused"] * n, "dp_group": list(range(n))}).cast(
        {"rank": pl.Int32, "dp_group": pl.Int32}
    )


# One rank; host thread 1 launches K1 and K3 on stream 7 and K2 on stream 8:
#   L1 cudaLaunchKernel [0, 10] → K1 [15, 115]   (stream 7 empty: launch delay 15)
#   L2 cudaLaunchKernel [20, 30] → K2 [40, 60]   (stream 8 empty: launch delay 20)
#   L3 cudaLaunchKernel [40, 50] → K3 [120, 150] (K1 still runs at the launch: stream order, gap 5)
# Chains: L1 → K1 → gap → K3 = 15 + 100 + 5 + 30 = 150; through the host L1, L2 → K2 = 10 + 0 + 20 + 20
# = 50. The path: 150 = launch 15 + compute 130 + gap 5.
TWO_STREAMS = [
    (0, 1, False, "host", "cudaLaunchKernel", 0, 10, 1),
    (0, 1, False, "host", "cudaLaunchKernel", 20, 10, 2),
    (0, 1, False, "host", "cudaLaunchKernel", 40, 10, 3),
    (0, 7, True, "compute", "K1", 15, 100, 1),
    (0, 8, True, "compute", "K2", 40, 20, 2),
    (0, 7, True, "compute", "K3", 120, 30, 3),
]


def test_two_streams_longest_path_by_hand():
    cp = critical_path(_events(TWO_STREAMS), _ranks(1))
    step = cp.steps.row(0, named=True)
    assert step["length_ns"] == 150
    assert (step["launch_ns"], step["compute_ns"], step["gap_ns"]) == (15, 130, 5)
    assert (
        sum(
            step[f"{k}_ns"]
            for k in ("compute", "copy", "transfer", "barrier", "launch", "sync", "host", "gap")
        )
        == 150
    )
    path = cp.path.select("kind", "name", "start_ns", "end_ns").rows()
    assert path == [
        ("launch", "K1", 0, 15),
        ("compute", "K1", 15, 115),
        ("gap", "K3", 115, 120),
        ("compute", "K3", 120, 150),
    ]


def test_what_if_zero_off_the_path_and_at_most_the_shortening_on_it():
    cp = critical_path(_events(TWO_STREAMS), _ranks(1), top=5)
    k = {r["name"]: r for r in cp.kernels.iter_rows(named=True)}
    # K1 100 → 80: the path 15 + 80 + 5 + 30 = 130, the host chain 50: gain 20 = its shortening
    assert (k["K1"]["shortening_ns"], k["K1"]["gain_ns"]) == (20, 20)
    # K3 30 → 24: gain 6
    assert (k["K3"]["shortening_ns"], k["K3"]["gain_ns"]) == (6, 6)
    assert "K2" not in k  # off the path: not listed
    cp_all = critical_path(_events(TWO_STREAMS), _ranks(1), top=5)
    assert cp_all.kernels.get_column("gain_ns").le(cp_all.kernels.get_column("shortening_ns")).all()


def test_what_if_off_the_path_gains_nothing():
    # K2 made the longest kernel on stream 8 but still off the path: 10 + 20 + 80 = 110 < 150
    rows = [r if r[4] != "K2" else (0, 8, True, "compute", "K2", 40, 80, 2) for r in TWO_STREAMS]
    rows.append((0, 8, True, "compute", "K2b", 125, 1, None))  # a second kernel on stream 8
    cp = critical_path(_events(rows), _ranks(1), top=10)
    assert cp.steps.get_column("length_ns").to_list() == [150]
    assert "K2" not in cp.kernels.get_column("name").to_list()


# Two ranks, device only, one all-reduce:
#   rank 0: Ka [0, 100], AllReduce [100, 300] (arrives at 100, waits for rank 1), Kafter0 [300, 400]
#   rank 1: Kb [0, 250], AllReduce [250, 300] (the last to arrive), Kafter1 [300, 320]
# The release is at 250. The path enters it from rank 1 (Kb 250, barrier 0), runs the transfer to
# rank 0's end of the all-reduce (300 − 250 = 50) and Kafter0 (100): 400 = compute 350 + transfer 50.
# Rank 0's own chain through its wait (Ka 100 + AllReduce 200) is off the path by construction: were
# it on it, the transfer would read 200.
TWO_RANKS = [
    (0, 7, True, "compute", "Ka", 0, 100, None),
    (0, 7, True, "collective", "AllReduce", 100, 200, None),
    (0, 7, True, "compute", "Kafter0", 300, 100, None),
    (1, 7, True, "compute", "Kb", 0, 250, None),
    (1, 7, True, "collective", "AllReduce", 250, 50, None),
    (1, 7, True, "compute", "Kafter1", 300, 20, None),
]


def test_two_ranks_the_late_ranks_chain_is_on_the_path():
    cp = critical_path(_events(TWO_RANKS), _ranks(2))
    step = cp.steps.row(0, named=True)
    assert (step["length_ns"], step["compute_ns"], step["transfer_ns"], step["barrier_ns"]) == (
        400,
        350,
        50,
        0,
    )
    assert step["hops"] == 1
    assert cp.path.select("rank", "kind", "name").rows() == [
        (1, "compute", "Kb"),
        (1, "barrier", "AllReduce"),
        (0, "transfer", "AllReduce"),
        (0, "compute", "Kafter0"),
    ]
    by_rank = dict(cp.by_rank.select("rank", "on_path_ns").rows())
    assert by_rank == {1: 250, 0: 150}


def test_two_ranks_what_if():
    cp = critical_path(_events(TWO_RANKS), _ranks(2), top=5)
    k = {r["name"]: r for r in cp.kernels.iter_rows(named=True)}
    assert (k["Kb"]["shortening_ns"], k["Kb"]["gain_ns"]) == (50, 50)  # the late rank's work: all of it
    assert (k["Kafter0"]["shortening_ns"], k["Kafter0"]["gain_ns"]) == (20, 20)
    assert "Ka" not in k  # the early rank's work before the barrier: off the path


def test_no_steps_is_a_named_error():
    ev = _events(TWO_STREAMS).with_columns(step=pl.lit(None, pl.Int32))
    with pytest.raises(NoWindows):
        critical_path(ev, _ranks(1))
    with pytest.raises(NoWindows):
        critical_path(_events(TWO_STREAMS), _ranks(1), annotation="ProfilerStep")
