"""The timeline's traces skip plotly's per-element validation (its costliest part); a consistency
check that this changes nothing: the figure, rebuilt by plotly *with* every check, is the same figure."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from asaptrace import pipeline
from asaptrace.viz.timeline import timeline_figure, worst_window


@pytest.mark.parametrize("layers", [None, "worst"])
def test_the_unvalidated_timeline_is_what_plotly_validates(coupled_store, coupled_diagnosis, layers):
    t = coupled_diagnosis.tables
    step, window = worst_window(t["barrier_by_rank_layer"], t["step_breakdown"])
    spans = pipeline.timeline_of(
        coupled_store, coupled_diagnosis, step=step, layers=window if layers else (0, 60), rank_subset=None
    )
    fig = timeline_figure(spans)
    assert len(fig.data) >= 3 and sum(len(tr.x) for tr in fig.data) > 1000  # kinds, waits, many segments
    checked = go.Figure(fig.to_dict())  # every property validated and coerced by plotly
    assert json.loads(checked.to_json()) == json.loads(fig.to_json())  # the same figure (key order aside)
