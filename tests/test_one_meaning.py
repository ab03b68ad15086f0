"""One number, one meaning: exposed communication agrees between the step breakdown and the
overlap table, severity is monotone within a finding's kind, and time counted in another finding
is said (docs/analyses/findings.md)."""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.analyze.diagnosis import diagnose
from asaptrace.analyze.findings import SEVERITY_SHARES, cost_severity
from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import diagnose_store, enrich_store
from tests._analysis_helpers import check_one_meaning, ingest, moe_scenario, write_traces

US = 1000
_RANK = {"high": 3, "medium": 2, "low": 1, "info": 0}


def _frame(rows: list[tuple]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Device events (rank, stream, kind, start µs, duration µs, step) and their ranks (no DP groups)."""
    n = len(rows)
    ev = pl.DataFrame(
        {
            "rank": [r[0] for r in rows],
            "stream": [r[1] for r in rows],
            "is_device": [True] * n,
            "kind": [r[2] for r in rows],
            "name": [f"k{i}" for i in range(n)],
            "ts_ns": [r[3] * US for r in rows],
            "dur_ns": [r[4] * US for r in rows],
            "step": pl.Series([r[5] for r in rows], dtype=pl.Int32),
            "layer": pl.Series([None] * n, dtype=pl.Int16),
            "micro_batch": pl.Series([None] * n, dtype=pl.Int8),
        }
    )
    ranks = sorted({r[0] for r in rows})
    rk = pl.DataFrame(
        {
            "rank": ranks,
            "dp_group": pl.Series([None] * len(ranks), dtype=pl.Int32),
            "role": ["unknown"] * len(ranks),
            "clock_offset_ns": pl.Series([None] * len(ranks), dtype=pl.Int64),
            "clock_residual_ns": pl.Series([None] * len(ranks), dtype=pl.Int64),
        }
    )
    return ev, rk


def test_compute_outside_the_step_hides_the_steps_communication():
    # One rank, one step annotation. Step 0: a GEMM [0, 100] µs and an all-reduce [60, 200] µs on
    # another stream; a GEMM launched in the step but finishing after its annotation, [100, 190],
    # is labelled outside every step (step null) — the overhang of a real training trace.
    # Overlap (per device): comm 140; under compute 60..190 = 130; exposed 190..200 = 10 µs.
    # Breakdown, step 0 window [0, 200]: compute 0..190 (its own GEMM and the overhang one),
    # transfer 190..200 = 10 µs — not 100..200 = 100 µs, as when only step 0's GEMM counted.
    ev, rk = _frame(
        [(0, 7, "gemm", 0, 100, 0), (0, 9, "collective", 60, 140, 0), (0, 7, "gemm", 100, 90, None)]
    )
    d = diagnose(ev, rk)
    ov = d.tables["overlap_by_rank"].row(0, named=True)
    assert (ov["comm_ns"], ov["overlapped_ns"], ov["exposed_comm_ns"]) == (140 * US, 130 * US, 10 * US)
    bd = d.tables["step_breakdown"]
    s0 = bd.filter(pl.col("step") == 0).row(0, named=True)
    assert (s0["step_time_ns"], s0["compute_ns"], s0["transfer_ns"], s0["idle_ns"]) == (
        200 * US,
        190 * US,
        10 * US,
        0,
    )
    assert bd.get_column("transfer_ns").sum() == ov["exposed_comm_ns"]  # one meaning, equal here
    check_one_meaning(d.tables)


def test_steps_that_do_not_overlap_are_unchanged():
    # two steps apart: [0, 100] GEMM + [100, 150] all-reduce; [300, 400] GEMM + [350, 420] all-reduce
    # step 0: transfer 50; step 1: 400..420 = 20 → 70 µs, the overlap's exposed communication
    ev, rk = _frame(
        [
            (0, 7, "gemm", 0, 100, 0),
            (0, 9, "collective", 100, 50, 0),
            (0, 7, "gemm", 300, 100, 1),
            (0, 9, "collective", 350, 70, 1),
        ]
    )
    d = diagnose(ev, rk)
    assert d.tables["step_breakdown"].get_column("transfer_ns").to_list() == [50 * US, 20 * US]
    assert d.tables["overlap_by_rank"].get_column("exposed_comm_ns").to_list() == [70 * US]


def _overlap_finding(comm_us: int, overlapped_us: int, step_us: int):
    """The overlap finding of a one-rank run with ``comm_us`` of communication, ``overlapped_us``
    of it under compute, in one step of ``step_us`` (compute from 0, the comm at its end)."""
    compute = step_us - (comm_us - overlapped_us)
    ev, rk = _frame(
        [(0, 7, "gemm", 0, compute, 0), (0, 9, "collective", compute - overlapped_us, comm_us, 0)]
    )
    d = diagnose(ev, rk)
    (f,) = [f for f in d.findings if f.code == "overlap"]
    return f


def test_a_lower_overlap_efficiency_is_never_less_severe():
    # the two cases: 113 ms of communication 96 % hidden in a 129 ms step (4.15 ms exposed,
    # 3.2 % of the step) is medium; 3 % efficiency (DLRM-like: 6.07 ms of comm, 5.89 exposed, of a
    # 14.6 ms step, 40 %) is high
    hidden = _overlap_finding(113_000, 113_000 - 4_150, 129_000)
    poor = _overlap_finding(6_070, 180, 14_600)
    assert hidden.data["overlap_efficiency"] == pytest.approx(0.963, abs=1e-3)
    assert (hidden.severity, poor.severity) == ("medium", "high")
    # property: the same communication in the same step, efficiency from 0 % to 100 % in 5 % steps
    for comm, step in ((1_000, 100_000), (20_000, 100_000), (60_000, 100_000)):
        sev = [_RANK[_overlap_finding(comm, comm * k // 20, step).severity] for k in range(21)]
        assert sev == sorted(sev, reverse=True), (comm, sev)


def test_severity_rule_is_monotone_in_the_share_at_stake():
    step = 1_000_000
    shares = [i / 1000 for i in range(0, 400)]
    sev = [_RANK[cost_severity(int(s * step), step)] for s in shares]
    assert sev == sorted(sev)
    # the written thresholds: 10 % high, 3 % medium, above 0 low, 0 info
    assert dict(SEVERITY_SHARES) == {"high": 0.10, "medium": 0.03}
    assert [cost_severity(c, step) for c in (0, 1, 29_999, 30_000, 99_999, 100_000)] == [
        "info",
        "low",
        "low",
        "medium",
        "medium",
        "high",
    ]


def test_time_counted_in_the_barrier_finding_is_said_and_not_ranked_twice(tmp_path):
    store = enrich_store(
        ingest(write_traces(tmp_path / "t", moe_scenario(annotations=False)), tmp_path / "s")
    )
    d = diagnose_store(store)
    check_one_meaning(d.tables, store.events())
    codes = [f.code for f in d.findings]
    (ov,) = [f for f in d.findings if f.code == "overlap"]
    (bw,) = [f for f in d.findings if f.code == "barrier_wait"]
    n = store.ranks().collect().height
    waited = ov.data["exposed_comm_ns"] - ov.data["exposed_transfer_ns"]
    assert waited > 0
    assert ov.data["counted_in"] == "barrier_wait" and ov.data["counted_ns"] == waited // n
    assert waited == bw.data["exposed_wait_ns"]  # the two findings quote one measurement
    assert "(counted in the barrier-wait finding)" in ov.text
    # ranked by the time no other finding counts: the barrier finding first at equal severity
    if ov.severity == bw.severity:
        assert codes.index("barrier_wait") < codes.index("overlap")
    # the barrier finding's own time is the exposed wait, the same number the overlap text cites
    assert bw.cost_ns == d.tables["step_breakdown"].get_column("wait_ns").sum() // n


REAL = [
    "kineto-dlrm-8rank",
    "kineto-hta-samples/nccl_data.json.gz",
    "kineto-hta-samples/sampled_rank-0.json.gz",
    "ascend-sample",
    "nsys-sample",
    "tracelens-serving/sglang_Qwen3-8B_prefilldecode.json.gz",
    "tracelens-serving/vllm_prefilldecode_piecewise_graph_execution.json.gz",
]


@pytest.mark.parametrize("name", REAL)
def test_real_traces_keep_one_meaning_and_count_every_nanosecond_once(name, shared_data, tmp_path):
    path = shared_data / "traces" / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    store = enrich_store(ingest_paths([path], tmp_path / "s", jobs=1))
    d = diagnose_store(store)
    check_one_meaning(d.tables, store.events())  # and every nanosecond once, copies never compute
