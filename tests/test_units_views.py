"""One formatter of durations for every face, and one display policy (views) for the CLI and later faces."""

from __future__ import annotations

import polars as pl

from asaptrace.analyze.diagnosis import Diagnosis
from asaptrace.units import (
    cell,
    format_table,
    header,
    human_bytes,
    human_ns,
    more_rows,
    percent,
    plural,
    text_ns,
)
from asaptrace.views.diagnosis import diagnosis_tables


def test_durations_in_the_largest_unit_they_fill():
    # 1 234 567 ns = 1.234567 ms: three decimals in tables, three significant digits in prose
    assert human_ns(1_234_567) == "1.235 ms"
    assert text_ns(1_234_567) == "1.23 ms"
    # 123 456 789 ns = 123.456789 ms: prose drops the decimals from 100 on
    assert text_ns(123_456_789) == "123 ms"
    assert human_ns(2_500_000_000_000) == "2,500.000 s"
    assert human_ns(999) == "999 ns" and text_ns(999.4) == "999 ns"
    # prose never shows a bare "?" for an unknown (issue 13): it says so
    assert human_ns(None) == "–" and text_ns(None) == "unknown"
    assert human_bytes(3 * 1024**2) == "3.0 MiB"
    assert percent(0.255) == "26%" and percent(None) == "unknown"


def test_cells_follow_their_column_name():
    assert cell("mean_wait_ns", 1_500) == "1.500 µs"
    assert cell("last_share", 0.5) == "50.0%"
    assert cell("sum_sq_ratio", 2.2049) == "2.20×"
    assert cell("events", 1234567) == "1,234,567"
    assert cell("mean_seq_len", 23963.6) == "23,964" and cell("x", 732.44) == "732.4"
    assert cell("rank", 1234) == "1234"
    assert cell("dp_group", None) == "–"
    assert cell("outlier", True) == "yes" and cell("outlier", False) == "no"
    # compare tables pair columns as _a / _b / _delta: they format like the column they pair
    # … except that a difference of two shares is in percentage points (45% → 20%: -25 pp, not -25%)
    assert cell("wait_share_delta", -0.25) == "-25.0 pp"


def test_a_duration_column_is_in_one_unit_named_in_its_header():
    # largest |value| 1.5e9 ns fills seconds: every cell in s with three decimals, "(s)" in the header
    headers, rows = format_table(
        ["dp_group", "mean_wait_ns", "n_ranks"],
        [
            {"dp_group": 0, "mean_wait_ns": 1_500_000_000, "n_ranks": 4},
            {"dp_group": 1, "mean_wait_ns": 17_403_000, "n_ranks": 4},
        ],
    )
    assert headers == ["dp group", "mean wait (s)", "n ranks"]
    assert rows == [["0", "1.500", "4"], ["1", "0.017", "4"]]
    # 49 µs at most fills µs; below a microsecond the column stays in ns
    assert format_table(["wait_ns"], [{"wait_ns": 49_000}])[0] == ["wait (µs)"]
    # under 1 µs: still µs, never a raw nanosecond count under "(ns)" (issue 42)
    assert format_table(["wait_ns"], [{"wait_ns": 999}]) == (["wait (µs)"], [["0.999"]])
    assert format_table(["wait_ns"], [{"wait_ns": 0}]) == (["wait (µs)"], [["0.000"]])
    # a column with no value names no unit (an empty table never shows "(ns)" headers)
    assert format_table(["wait_ns"], [{"wait_ns": None}]) == (["wait"], [["–"]])
    assert header("last_share") == "last share"


def test_plurals_and_cut_tables():
    assert plural(1, "rank") == "1 rank" and plural(2, "rank") == "2 ranks" and plural(0, "file") == "0 files"
    assert more_rows(1) == "… and 1 more row (--json has them all)"
    assert more_rows(19) == "… and 19 more rows (--json has them all)"


def _diag(stragglers: pl.DataFrame, barriers: int) -> Diagnosis:
    empty = pl.DataFrame()
    tables = {
        "barrier_instances": pl.DataFrame({"x": list(range(barriers))}),
        "barrier_by_group": pl.DataFrame(
            {
                "dp_group": [0],
                "n_ranks": [4],
                "mean_wait_ns": [10],
                "last_share": [0.5],
                "imposed_wait_ns": [3],
            }
        ),
        "barrier_by_rank": pl.DataFrame(
            {
                "rank": [0],
                "dp_group": [0],
                "wait_ns": [1],
                "exposed_wait_ns": [1],
                "last_count": [1],
                "wait_share": [0.1],
            }
        ),
        "imbalance_by_step": empty,
        "overlap_by_role": empty,
        "stragglers": stragglers,
    }
    return Diagnosis(tables=tables, findings=[])


def test_views_show_outliers_and_last_arrivers_and_hide_barriers_without_barriers():
    s = pl.DataFrame(
        {
            "rank": [0, 1, 2, 3],
            "dp_group": [0, 0, 1, 1],
            "last_share": [0.0, 0.2, 0.7, 0.0],
            "compute_ratio": [1.0, 1.0, 1.1, 1.5],
            "moe_ratio": [1.0, 1.0, 1.0, 1.0],
            "cause": ["-", "-", "load", "slow"],
            "outlier": [False, False, False, True],
            "last_count": [0, 2, 7, 0],
        }
    )
    views = {v.name: v for v in diagnosis_tables(_diag(s, barriers=3))}
    # DP groups exist, so the per-rank barrier table is left to --json; empty tables are kept (shown "none")
    assert list(views) == ["barrier_by_group", "imbalance_by_step", "stragglers", "overlap_by_role"]
    assert views["overlap_by_role"].rows.height == 0
    # an empty key table says why, in one line, instead of bare headers
    assert views["overlap_by_role"].reason == "no device kernels in the store"
    assert views["stragglers"].reason == ""  # it has rows
    # rank 0 is neither an outlier nor ever last; the rest sorted by how often they were last
    assert views["stragglers"].rows.get_column("rank").to_list() == [2, 1, 3]
    assert views["stragglers"].rows.columns == views["stragglers"].columns
    assert [v.name for v in diagnosis_tables(_diag(s, barriers=0))] == [
        "imbalance_by_step",
        "stragglers",
        "overlap_by_role",
    ]
    # cut to two rows: the one left out is counted
    assert diagnosis_tables(_diag(s, barriers=3), limit=2)[2].more == 1


def test_one_table_view_for_every_face():
    """The terminal, the report and the dashboard show one TableView: the terminal's is the report's
    cut to its row limit, with the rows left out counted; the dashboard picks no columns itself."""
    from asaptrace.report.render import _table_context, key_tables
    from asaptrace.views.diagnosis import imbalance_steps_view, key_table, overlap_roles_view

    s = pl.DataFrame(
        {
            "rank": list(range(6)),
            "dp_group": [0, 0, 1, 1, 2, 2],
            "last_share": [0.1] * 6,
            "compute_ratio": [1.0] * 6,
            "moe_ratio": [1.0] * 6,
            "cause": ["load"] * 6,
            "outlier": [False] * 6,
            "last_count": [6, 5, 4, 3, 2, 1],
        }
    )
    diag = _diag(s, barriers=3)
    report = {v.name: v for v in key_tables(diag.tables)}
    terminal = {v.name: v for v in diagnosis_tables(diag, limit=4)}
    assert list(report) == list(terminal)
    # six ranks were ever last: the report shows all six, the terminal four and counts the other two
    assert report["stragglers"].rows.height == 6 and report["stragglers"].more == 0
    assert terminal["stragglers"].rows.height == 4 and terminal["stragglers"].more == 2
    for name, v in terminal.items():
        r = report[name]
        assert (v.title, v.columns, v.caption, v.reason) == (r.title, r.columns, r.caption, r.reason)
    # the report's HTML id comes from the view's name (stable ids keep reports reproducible)
    assert _table_context(report["stragglers"])["id"] == "table-stragglers"
    # the dashboard's imbalance table: the key table's ratios, not its wait (the figures show that)
    by_step = pl.DataFrame(
        {"step": [0], "n_groups": [2], "tokens_ratio": [1.5], "wait_ns": [10], "extra": [1]}
    )
    assert imbalance_steps_view(by_step).columns == ["step", "n_groups", "tokens_ratio"]
    roles = pl.DataFrame({c: [1] for c in [*key_table("overlap_by_role").columns, "extra"]})
    assert overlap_roles_view({"overlap_by_role": roles}).rows.columns == key_table("overlap_by_role").columns


def test_the_advice_header_names_the_makespan_its_lines_are_measured_against():
    from asaptrace.views.advice import advice_header

    j = {"deployment_phrase": "disaggregated, 32 devices", "measured_makespan_ns": 13_414_000_000}
    # a disaggregated replay is not exact: the what-ifs' "of 13.7 s" is the reference replay's, and
    # the header says so rather than leave 13.4 s and 13.7 s unexplained
    head = advice_header(j | {"reference_makespan_ns": 13_681_000_000}, "d.store")
    assert "measured makespan 13.4 s (the what-ifs are measured against its replay's 13.7 s);" in head
    # a coupled replay is exact (same reading: said once); no what-if ran (0): nothing to compare
    for ref in (13_399_000_000, 0):
        head = advice_header(j | {"reference_makespan_ns": ref}, "d.store")
        assert (
            head
            == "d.store: disaggregated, 32 devices, measured makespan 13.4 s; what each change would win back:"
        )


def test_an_empty_imbalance_table_says_what_would_fill_it():
    from asaptrace.views.diagnosis import empty_reason

    def ranks(n: int) -> dict[str, pl.DataFrame]:
        return {"step_breakdown": pl.DataFrame({"rank": list(range(n)), "dp_group": [None] * n})}

    # several ranks without groups: --parallel names the groups, so the line says to pass it
    assert empty_reason("imbalance_by_step", ranks(2)).endswith("(pass --parallel)")
    # one rank (a single-GPU serving trace): no option makes groups of one rank, so none is offered
    one = empty_reason("imbalance_by_step", ranks(1))
    assert one.startswith("one rank traced") and "--parallel" not in one


def test_the_sweep_legend_explains_the_lower_bound_mark_only_where_one_is_shown():
    from asaptrace.views.sweep import sweep_slo_view

    res = {
        "policies": ["coupled", "asap"],
        "slo_rps": {"coupled": 3.35, "asap": 4.0},
        "slo_censored": {"coupled": False, "asap": False},
        "ratios": {"coupled": 1.0, "asap": 1.19},
        "seeds": [0],
    }
    # no policy met the SLO at every rate swept: no "≥" in the table, none in its legend
    view = sweep_slo_view(res)
    assert "≥" not in " ".join(str(v) for v in view.rows.row(1)) and "≥" not in view.caption
    view = sweep_slo_view(res | {"slo_censored": {"coupled": False, "asap": True}})
    assert view.rows.row(1)[1] == "≥ 4.00" and view.caption.startswith("≥: the SLO was met at every rate")


def test_the_timeline_window_says_worst_only_when_a_wait_points_there():
    from asaptrace.views.barriers import window_text

    assert window_text(1, (2, 4)) == "step 1, layers 2–4 (where the summed wait is largest)"
    # no wait inside a layer (a training step, a single device): the first step whole, not "worst"
    assert window_text(10, None) == "step 10, the whole step (no wait inside a layer to point at)"


def test_a_partial_trace_is_never_called_a_single_device():
    from asaptrace.info import deployment_phrase

    # one rank of a two-rank job (HTA's nccl_data: distributedInfo world_size 2) and two of 128
    assert deployment_phrase({"world_size": 1, "declared_world_size": 2, "deployment": "unknown"}) == (
        "unknown deployment, 1 of 2 devices traced"
    )
    assert deployment_phrase({"world_size": 2, "declared_world_size": 128, "deployment": "dense"}) == (
        "dense model, 2 of 128 devices traced"
    )
    assert deployment_phrase({"world_size": 1, "deployment": "single-device"}) == "single device"
    assert deployment_phrase({"world_size": 32, "deployment": "coupled"}) == "coupled, 32 devices"


def test_percent_rounds_a_half_up_as_people_do():
    from asaptrace.units import percent

    # DLRM: rank 7 arrived last at 5 of 8 barriers; the table beside it says 62.5%
    assert percent(5 / 8) == "63%" and percent(5 / 8, 1) == "62.5%"
    assert percent(0.0034, 1) == "0.3%" and percent(None) == "unknown" and percent(1.0) == "100%"


def test_the_wrapper_never_splits_a_number_from_its_unit():
    """Issue 42: ``info`` printed "span 14.6\\ns" at some widths. At every width the wrapped lines
    keep "7.245 s", "32 ranks" and "asaptrace 0.1.0" whole, and rejoin to the text."""
    from asaptrace.views.table import wrap

    text = "store format v2 (asaptrace 0.1.0)  32 ranks  166,656 events  span 7.245 s, 1 rank waited 15.2 ms"
    for width in range(20, 60):
        lines = wrap(text, width)
        joined = "\n".join(lines)
        for phrase in ("7.245 s", "32 ranks", "166,656 events", "asaptrace 0.1.0", "15.2 ms", "1 rank"):
            assert phrase in joined, (width, lines)
        assert " ".join(" ".join(lines).split()) == " ".join(text.split())
