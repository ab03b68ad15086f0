"""The line sweep of :mod:`asaptrace.analyze._coverage` on hand-worked intervals: several groups
whose counts must not leak from one group into the next (one running sum over the sorted whole)."""

from __future__ import annotations

import polars as pl

from asaptrace.analyze._coverage import coverage, segments


def test_segments_of_two_groups_hand_worked() -> None:
    iv = pl.DataFrame(
        {
            "rank": [0, 0, 1, 1, 1],
            "start": [0, 5, 100, 100, 150],
            "end": [10, 20, 200, 120, 150],  # rank 1's last interval is empty: left out
            "cat": [0, 1, 1, 0, 0],
        }
    )
    cuts = pl.DataFrame({"rank": [0], "t": [7]})  # a window edge where nothing starts or ends
    got = segments(iv, ["rank"], 2, cuts)
    assert got.to_dict(as_series=False) == {
        "rank": [0, 0, 0, 0, 0, 1, 1, 1],
        "t": [0, 5, 7, 10, 20, 100, 120, 200],
        "ns": [5, 2, 3, 10, 0, 20, 80, 0],
        "mask": [1, 3, 3, 2, 0, 3, 2, 0],
    }


def test_coverage_adds_up_to_each_groups_span() -> None:
    iv = pl.DataFrame({"rank": [2, 1, 1], "start": [0, 0, 30], "end": [40, 10, 50], "cat": [0, 0, 0]})
    got = coverage(iv, ["rank"], 1).sort("rank", "mask")
    assert got.to_dict(as_series=False) == {
        "rank": [1, 1, 2, 2],
        "mask": [0, 1, 0, 1],
        "ns": [20, 30, 0, 40],  # rank 1: idle 10..30 inside its span 0..50
        "segments": [1, 2, 0, 1],
    }
