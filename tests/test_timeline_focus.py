"""A big run's Timeline opens on a few whole DP groups (the last to arrive and those that wait
longest for it), says so, and adds the critical path once it is walked: worked by hand on small
frames, and through the dashboard's callbacks on the 32-rank coupled sample."""

from __future__ import annotations

import polars as pl

from asaptrace.viz import timeline
from asaptrace_dashboards.pages import timeline as page
from asaptrace_dashboards.state import Stores

# 8 ranks in DP groups of 2: {0,1} {2,3} {4,5} {6,7}
RANKS = pl.DataFrame({"rank": list(range(8)), "dp_group": [0, 0, 1, 1, 2, 2, 3, 3]})


def _waits(rows: list[tuple[int, int, int, int, int | None]]) -> pl.DataFrame:
    """(step, layer, rank, wait_ns, last_rank) rows of barrier instances."""
    return pl.DataFrame(
        rows, schema=["step", "layer", "rank", "wait_ns", "last_rank"], orient="row"
    ).with_columns(
        pl.col("step").cast(pl.Int32), pl.col("layer").cast(pl.Int16), pl.col("rank").cast(pl.Int32)
    )


def test_focus_is_the_last_ranks_group_then_the_groups_that_wait_longest():
    # in step 0, layers 1-2: r5 arrives last (group 2); group 1 waits 30, group 3 waits 20, group 0 10
    w = _waits(
        [
            (0, 1, 0, 10, 5),
            (0, 1, 2, 20, 5),
            (0, 2, 3, 10, 5),
            (0, 2, 6, 20, 5),
            (0, 2, 4, 0, 5),  # r5's group-mate does not wait: arrives with it
            (0, 9, 0, 999, 1),  # another layer: not in the window
            (1, 1, 0, 999, 1),  # another step
        ]
    )
    ranks, why = timeline.focus_ranks(w, RANKS, step=0, layers=(1, 2), most=4)
    assert ranks == [2, 3, 4, 5]  # whole groups: r5's, then group 1 (30 > 20 > 10)
    assert "r5, the last to arrive" in why
    ranks, _ = timeline.focus_ranks(w, RANKS, step=0, layers=(1, 2), most=6)
    assert ranks == [2, 3, 4, 5, 6, 7]
    # a group that would not fit whole is left out: 5 ranks hold two groups of 2
    assert timeline.focus_ranks(w, RANKS, step=0, layers=(1, 2), most=5)[0] == [2, 3, 4, 5]


def test_focus_without_a_wait_in_the_window_is_the_first_ranks_and_says_so():
    ranks, why = timeline.focus_ranks(_waits([(0, 1, 0, 10, 5)]), RANKS, step=1, layers=None, most=3)
    assert ranks == [0, 1, 2] and why == "the first 3 ranks (no barrier wait in this window)"


def test_the_timeline_of_a_big_run_opens_on_its_focus_and_says_which(coupled_store, monkeypatch):
    # the sample has 32 ranks; as if the focus began above 8
    monkeypatch.setattr(page, "FOCUS_ABOVE", 8)
    stores = Stores([coupled_store.path])
    _steps, step, _lo, _hi, window, _marks, options, focus, msg = page.timeline_controls(stores, "0")
    assert msg is None and len(options) == 32 and 0 < len(focus) <= 16
    s = stores.get("0")
    groups = {r["rank"]: r["dp_group"] for r in s.info["ranks"]}
    chosen = {groups[r] for r in focus}
    assert sorted(focus) == sorted(r for r, g in groups.items() if g in chosen)  # whole DP groups
    # the rank that arrives last in the window, weighted by the wait it causes, is among them
    inst = s.diag.tables["barrier_instances"].filter(
        (pl.col("step") == step) & pl.col("layer").is_between(*window) & (pl.col("wait_ns") > 0)
    )
    last = inst.group_by("last_rank").agg(pl.col("wait_ns").sum()).sort("wait_ns", descending=True)
    assert last.item(0, "last_rank") in focus
    fig = page.timeline_fig(stores, "0", step, window, focus)
    drawn = {int(t.split(" ")[0][1:]) for t in fig.layout.yaxis.ticktext}
    assert drawn == set(focus)
    note = page.timeline_note(stores, "0", step, window, focus)
    assert f"{len(focus)} of 32 ranks shown: the DP group of r{last.item(0, 'last_rank')}, the last" in note
    assert "clear the ranks box to draw all 32" in note
    # another subset is said to be chosen, not explained
    assert "2 of 32 ranks shown (chosen above)" in page.timeline_note(stores, "0", step, window, [0, 1])


def test_the_critical_path_comes_after_the_lanes(coupled_store):
    stores = Stores([coupled_store.path])
    _steps, step, _lo, _hi, window, _marks, _options, focus, _msg = page.timeline_controls(stores, "0")
    assert focus is None  # 32 ranks: all drawn
    fig = page.timeline_fig(stores, "0", step, window, None)
    assert "critical path" not in {t.name for t in fig.data}  # the lanes never wait for the walk
    patch, note = page.critical_patch(stores, page.drawn_window("0", step, window, None))
    ops = patch.to_plotly_json()["operations"]
    assert [op["operation"] for op in ops] == ["Append"] and ops[0]["location"] == ["data"]
    added = ops[0]["params"]["value"]
    assert added.name == "critical path" and len(added.x) >= 2
    assert note == " The black line is the step's critical path (asaptrace critical)."
    # the same trace as the report's figure draws with the path given at once
    path = page._critical(stores.get("0"), step, stores.get("0").timeline(step, tuple(window), None))
    whole = timeline.timeline_figure(stores.get("0").timeline(step, tuple(window), None), critical=path)
    (ref,) = [t for t in whole.data if t.name == "critical path"]
    assert list(ref.x) == list(added.x) and list(ref.y) == list(added.y)
