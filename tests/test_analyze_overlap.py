"""Compute/communication overlap, with DeepEP traffic counted as communication."""

from __future__ import annotations

import pytest

from asaptrace.analyze.overlap import overlap_by_rank, overlap_by_role
from asaptrace.pipeline import enrich_store
from tests._analysis_helpers import (
    ATTENTION,
    COMM_STREAM,
    DISPATCH,
    RankTrace,
    ingest,
    moe_scenario,
    write_traces,
)

US = 1000


def test_hand_worked_overlap(tmp_path):
    # compute [0, 100] and [200, 250] µs; a DeepEP dispatch [50, 150] on the comm stream
    t = RankTrace(0, 1)
    t.kernel(ATTENTION, 0, 100)
    t.kernel(DISPATCH, 50, 100, stream=COMM_STREAM)
    t.kernel(ATTENTION, 200, 50)
    store = enrich_store(ingest(write_traces(tmp_path / "t", [t]), tmp_path / "s"))
    r = overlap_by_rank(store.events(), store.ranks()).row(0, named=True)
    # span 250; compute 150; comm 100, of it 50 under compute; exposed 50; idle 150..200 = 50
    assert (r["span_ns"], r["compute_ns"], r["comm_ns"]) == (250 * US, 150 * US, 100 * US)
    assert (r["overlapped_ns"], r["exposed_comm_ns"], r["idle_ns"]) == (50 * US, 50 * US, 50 * US)
    assert r["compute_ns"] + r["exposed_comm_ns"] + r["idle_ns"] == r["span_ns"]  # the identity
    assert r["overlap_efficiency"] == pytest.approx(0.5)
    assert r["utilisation"] == pytest.approx(150 / 250)
    assert (r["n_bubbles"], r["bubble_ns"]) == (1, 100 * US)  # no compute between 100 and 200 µs


def test_deepep_without_annotations_counts_as_communication(tmp_path):
    store = enrich_store(
        ingest(write_traces(tmp_path / "t", moe_scenario(annotations=False)), tmp_path / "s")
    )
    ov = overlap_by_rank(store.events(), store.ranks()).sort("rank")
    r0 = ov.row(0, named=True)
    # rank 0: dispatch 100..320 and 530..750, combine 370..420 and 800..850 → 540 µs, none hidden
    assert r0["comm_ns"] == 540 * US and r0["exposed_comm_ns"] == 540 * US
    assert r0["compute_ns"] == 300 * US and r0["idle_ns"] == 10 * US
    roles = overlap_by_role(ov)
    assert roles.get_column("n_ranks").to_list() == [4]
    assert roles.get_column("comm_ns")[0] == ov.get_column("comm_ns").sum()
