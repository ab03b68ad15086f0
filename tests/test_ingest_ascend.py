"""Ascend (torch_npu) ingest: a hand-built rank folder worked by hand, the real sample, bad input."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from asaptrace.errors import AsaptraceError, CorruptTrace
from asaptrace.ingest import detect_format
from asaptrace.ingest.ascend import ascend_sources, read_ascend
from asaptrace.ingest.ascend.companions import find_companions, folder_facts
from asaptrace.ingest.discovery import find_sources
from asaptrace.ingest.driver import ingest_paths
from tests._ingest_helpers import (
    CANN,
    HCCL,
    HW,
    OVERLAP,
    PY,
    comm_op,
    flow,
    kd_row,
    rank_folder,
    span,
    standard_meta,
    write_json,
    write_kernel_details,
)

MM = "aclnnMm_MatMulCommon_MatMulV2"


def small_trace() -> list[dict]:
    """One step of a rank, every time in µs as torch_npu writes them (decimal strings).

    Python:  layer#3 annotation ⊃ aten::mm ⊃ aclnnMm (framework op), aten::add
    CANN:    AscendCL@aclnnMm launches K1 and K2 (two HostToDevice arrows)
    device:  K1 @1100.5 on stream 3 (also reached by an async_npu arrow from aclnnMm),
             K2 @1140 on stream 3, K3 @1200 on stream 5 (only an async_npu arrow from aten::add),
             MEMCPY_ASYNC @1300 (no arrow)
    HCCL:    hcom_allReduce op @1400 on the op thread, Notify_Wait + Memcpy on Plane 0
    overlap: Computing / Communication / Free slices (the profiler's own view)
    """
    return [
        span("layer#3", PY, PY, "1000.000", 600, cat="user_annotation", step=2, layer=3, micro_batch=0),
        span("aten::mm", PY, PY, "1000.000", 50, cat="cpu_op"),
        span("aclnnMm", PY, PY, "1010.000", 20, cat="cpu_op"),
        span("aten::add", PY, PY, "1050.000", 5, cat="cpu_op"),
        span("AscendCL@aclnnMm", CANN, PY, "1012.000", 10),
        span(MM, HW, 3, "1100.500", 30.25, **{"Task Type": "AI_CORE"}),
        span("aclnnMm_TransData_TransData", HW, 3, "1140.000", 10),
        span("aclnnAdd_AddAiCore_Add", HW, 5, "1200.000", 4),
        span("MEMCPY_ASYNC", HW, 3, "1300.000", 1),
        span("hcom_allReduce__123_0_1", HCCL, 1, "1400.000", 100),
        span("Notify_Wait", HCCL, 2, "1400.000", 80),
        span("Memcpy", HCCL, 2, "1480.000", 15),
        span("Computing", OVERLAP, 0, "1100.500", 30.25),
        span("Communication", OVERLAP, 1, "1400.000", 100),
        span("Free", OVERLAP, 3, "1131.000", 9),
        flow("s", "HostToDevice", "h1", CANN, PY, "1015.000"),
        flow("f", "HostToDevice", "h1", HW, 3, "1100.500"),
        flow("s", "HostToDevice", "h2", CANN, PY, "1016.000"),
        flow("f", "HostToDevice", "h2", HW, 3, "1140.000"),
        flow("s", "async_npu", 11, PY, PY, "1010.000"),
        flow("f", "async_npu", 11, HW, 3, "1100.500"),
        flow("s", "async_npu", 12, PY, PY, "1050.000"),
        flow("f", "async_npu", 12, HW, 5, "1200.000"),
        *standard_meta(),
    ]


def _events(result) -> pl.DataFrame:
    return pl.from_arrow(result.events).with_columns(pl.col("name", "kind", "cat").cast(pl.String))


def _one(ev: pl.DataFrame, name: str) -> dict:
    rows = ev.filter(pl.col("name") == name).to_dicts()
    assert len(rows) == 1, (name, rows)
    return rows[0]


@pytest.fixture
def small(tmp_path) -> Path:
    return rank_folder(tmp_path, "dp1_pp0_tp2_ep5_rank6_ascend_pt", small_trace())


def test_device_tasks_streams_and_exact_times(small):
    ev = _events(read_ascend(small))
    k1 = _one(ev, MM)
    # "1100.500" µs → 1_100_500 ns exactly; dur 30.25 µs → 30_250 ns
    assert (k1["ts_ns"], k1["dur_ns"], k1["stream"], k1["pid"]) == (1_100_500, 30_250, 3, HW)
    assert (k1["is_device"], k1["kind"], k1["cat"]) == (True, "compute", "ascend_hardware")
    assert _one(ev, "aclnnAdd_AddAiCore_Add")["stream"] == 5
    assert _one(ev, "AscendCL@aclnnMm")["kind"] == "host"


def test_process_roles_hccl_and_overlap_are_not_double_device_work(small):
    ev = _events(read_ascend(small))
    got = {
        n: (_one(ev, n)["is_device"], _one(ev, n)["kind"], _one(ev, n)["cat"])
        for n in ("hcom_allReduce__123_0_1", "Notify_Wait", "Memcpy", "Computing", "Free", "AscendCL@aclnnMm")
    }
    assert got == {
        "hcom_allReduce__123_0_1": (True, "collective", "hccl_op"),  # op thread "… Communication"
        "Notify_Wait": (True, "other", "hccl_task"),  # inner task on "Plane 0": inside the op
        "Memcpy": (True, "other", "hccl_task"),
        "Computing": (False, "annotation", "overlap_analysis"),  # the profiler's own summary
        "Free": (False, "annotation", "overlap_analysis"),
        "AscendCL@aclnnMm": (False, "host", "cann"),
    }
    # the Overlap "Communication" slice is an annotation even though its name says communication
    comm = ev.filter(pl.col("name") == "Communication")
    assert comm["kind"].to_list() == ["annotation"] and comm["is_device"].to_list() == [False]
    # Python events keep Kineto's category kinds, annotation args are kept for segmentation
    assert _one(ev, "layer#3")["kind"] == "annotation" and _one(ev, "aten::mm")["kind"] == "host"


def test_annotation_args_kept_like_kineto(small):
    r = read_ascend(small)
    ev = _events(r)
    args = pl.from_arrow(r.args)
    extra = args.filter(pl.col("eid") == _one(ev, "layer#3")["eid"])["extra"].item()
    assert json.loads(extra) == {"step": 2, "layer": 3, "micro_batch": 0}


def test_launch_correlation_from_flow_arrows(small):
    ev = _events(read_ascend(small))
    launch = _one(ev, "AscendCL@aclnnMm")["corr"]
    # one CANN call launched K1 and K2: both carry its correlation (HostToDevice preferred to async_npu)
    assert launch is not None
    assert _one(ev, MM)["corr"] == launch
    assert _one(ev, "aclnnMm_TransData_TransData")["corr"] == launch
    assert _one(ev, "aclnnMm")["corr"] is None  # its only link (K1) is taken by the runtime call
    # K3 has only the framework-op arrow: it links to aten::add, with a value of its own
    k3 = _one(ev, "aclnnAdd_AddAiCore_Add")["corr"]
    assert k3 is not None and k3 != launch and _one(ev, "aten::add")["corr"] == k3
    assert _one(ev, "MEMCPY_ASYNC")["corr"] is None


def test_accounting_counts_every_event(small):
    r = read_ascend(small)
    trace = small_trace()
    acc = r.accounting
    assert acc.read == len(trace)
    assert acc.kept["events"] == sum(e["ph"] == "X" for e in trace) == r.events.num_rows == 15
    assert acc.kept["flows"] == 8 and acc.kept["metadata"] == 19
    assert acc.read == acc.kept_total + acc.rejected_total


def test_kernel_details_fills_gaps_dedups_and_rejects_other_runs(tmp_path):
    timeline = rank_folder(
        tmp_path,
        "r_ascend_pt",
        small_trace(),
        kernel_details=[
            kd_row(MM, "1100.500", "30.250", shapes='"8192,512;512,4096"'),  # same task as the timeline's K1
            kd_row("aclnnSoftmax_SoftmaxV2", "1250.000", "3.500", stream=5, op_type="SoftmaxV2"),  # missing
            kd_row("aclnnOld_Old", "99999999.000", "1.000"),  # ~100 s away: another run
            kd_row("aclnnBad_Bad", "not-a-time", "1.0"),  # garbage time
        ],
    )
    with open(timeline.parent / "kernel_details.csv", "a") as f:
        f.write("x,y,z\n")  # a ragged garbage line
    r = read_ascend(timeline)
    ev = _events(r)
    acc = r.accounting
    assert acc.read == len(small_trace()) + 5
    assert acc.rejected["kernel_details_outside_timeline"] == 1
    assert acc.rejected["kernel_details_bad_row"] == 2
    assert acc.kept["events"] == 15 + 1 and acc.kept["args"] == 1  # K1's shapes
    added = _one(ev, "aclnnSoftmax_SoftmaxV2")
    assert (
        added["ts_ns"],
        added["dur_ns"],
        added["stream"],
        added["pid"],
        added["is_device"],
        added["kind"],
        added["cat"],
    ) == (1_250_000, 3_500, 5, HW, True, "compute", "kernel_details")
    assert ev.filter(pl.col("name") == MM).height == 1  # not duplicated
    args = pl.from_arrow(r.args)
    k1_args = args.filter(pl.col("eid") == _one(ev, MM)["eid"]).to_dicts()[0]
    assert (
        k1_args["input_dims"] == "8192,512;512,4096" and json.loads(k1_args["extra"])["op_type"] == "MatMulV2"
    )
    assert acc.read == acc.kept_total + acc.rejected_total


def test_communication_json_times_become_collective_metadata(tmp_path):
    comm = {
        "step1": {
            "collective": {
                "hcom_allReduce__123_0_1@987": comm_op(1400.0, 0.1, 0.02, 0.07, 0.05),
                "hcom_broadcast__5_0_1@987": comm_op(1500.0, 0.01, 0.005, 0.004, 0.0),  # not on the timeline
                "Total Op Info": {"Communication Time Info": {"Elapse Time(ms)": 0.11}},  # roll-up, not an op
            },
            "p2p": {},
        }
    }
    trace = small_trace()
    next(e for e in trace if e.get("name") == "hcom_allReduce__123_0_1")["args"] = {"step": 2}
    r = read_ascend(rank_folder(tmp_path, "r_ascend_pt", trace, communication=comm))
    ev = _events(r)
    args = pl.from_arrow(r.args)
    op = _one(ev, "hcom_allReduce__123_0_1")
    (row,) = args.filter(pl.col("eid") == op["eid"]).to_dicts()  # one row: the op's own args merged
    extra = json.loads(row["extra"])
    assert extra["step"] == 2
    # ms → ns: 0.1 ms = 100_000 ns, 0.02 → 20_000, 0.07 → 70_000, 0.05 → 50_000
    assert (
        extra["hccl_elapse_ns"],
        extra["hccl_transit_ns"],
        extra["hccl_wait_ns"],
        extra["hccl_sync_ns"],
    ) == (100_000, 20_000, 70_000, 50_000)
    assert (row["collective"], row["pg_name"], extra["hccl_step"]) == ("allReduce", "987", "step1")
    bc = _one(ev, "hcom_broadcast__5_0_1")
    assert (bc["ts_ns"], bc["dur_ns"], bc["kind"], bc["is_device"], bc["cat"], bc["pid"], bc["stream"]) == (
        1_500_000,
        10_000,
        "collective",
        True,
        "communication_json",
        HCCL,
        1,
    )
    assert r.accounting.read == len(small_trace()) + 2
    assert r.accounting.kept["events"] == 16 and r.accounting.kept["args"] == 1


def test_communication_op_without_start_time_matches_by_order(tmp_path):
    comm = {"step": {"collective": {"hcom_allReduce__123_0_1@1": comm_op(None, 0.1, 0.02, 0.07, 0.05)}}}
    r = read_ascend(rank_folder(tmp_path, "r_ascend_pt", small_trace(), communication=comm))
    op = _one(_events(r), "hcom_allReduce__123_0_1")
    extra = pl.from_arrow(r.args).filter(pl.col("eid") == op["eid"])["extra"].item()
    assert json.loads(extra)["hccl_wait_ns"] == 70_000 and r.accounting.kept["args"] == 1


def test_folder_without_timeline_reads_kernel_details(tmp_path):
    root = tmp_path / "dp0_pp0_tp0_ep3_rank3_ascend_pt"
    kd = write_kernel_details(
        root / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv",
        [
            kd_row("GroupedMatmul_1", "10.000", "5.000", stream=2),
            kd_row("hcom_alltoallv_1", "20.000", "7.000", stream=4, core="HCCL"),
        ],
    )
    (root / "profiler_info_3.json").write_text("{}")
    assert ascend_sources(find_sources([tmp_path]).files) == [kd.resolve()]
    assert detect_format(kd).name == "ascend"
    r = read_ascend(kd)
    ev = _events(r)
    assert ev.select("name", "ts_ns", "dur_ns", "stream", "kind").rows() == [
        ("GroupedMatmul_1", 10_000, 5_000, 2, "compute"),
        ("hcom_alltoallv_1", 20_000, 7_000, 4, "collective"),
    ]
    assert r.accounting.read == 2 and r.rank_info.rank == 3 and r.rank_info.source == "profiler_info"


def test_cluster_folder_one_source_per_rank_through_the_driver(tmp_path):
    cluster = tmp_path / "cluster"
    for r in (0, 1):
        name = f"dp0_pp0_tp{r}_ep{r}_rank{r}_ascend_pt"
        rank_folder(cluster, name, small_trace(), communication={"step": {"collective": {}, "p2p": {}}})
        write_json(cluster / name / f"profiler_info_{r}.json", {"config": {}})
        write_json(
            cluster / name / "profiler_metadata.json", {"distributed_args": {"rank": r, "world_size": 2}}
        )
        (cluster / name / f"PROF_000001_x/device_{4 + r}").mkdir(parents=True)
        write_json(cluster / name / "PROF_000001_x" / "mindstudio_profiler_output" / "msprof_1.json", [])
    files = find_sources([cluster]).files
    sources = ascend_sources(files)
    assert sources == [
        (
            cluster / f"dp0_pp0_tp{r}_ep{r}_rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
        ).resolve()
        for r in (0, 1)
    ]
    store = ingest_paths(sources, tmp_path / "store", jobs=1)
    ranks = store.read("ranks").sort("rank")
    assert ranks.select(
        "rank", "tp_index", "ep_index", "world_size", "device", "format", "rank_source"
    ).rows() == [
        (0, 0, 0, 2, 4, "ascend", "profiler_metadata"),
        (1, 1, 1, 2, 5, "ascend", "profiler_metadata"),
    ]


def test_rank_and_parallel_indices_from_the_folder_name(small, tmp_path):
    store = ingest_paths([small], tmp_path / "store", jobs=1)
    ranks = store.read("ranks")
    # dp1_pp0_tp2_ep5_rank6_ascend_pt: the driver's name rule gives rank, DP, PP, TP; EP comes from the reader
    assert ranks.select("rank", "dp_group", "pp_index", "tp_index", "ep_index", "rank_source").rows() == [
        (6, 1, 0, 2, 5, "filename:vllm-ascend")
    ]


def test_sources_fold_companions_beside_a_bare_timeline(tmp_path):
    t = write_json(tmp_path / "run" / "trace_view.json", small_trace())
    write_json(tmp_path / "run" / "communication.json", {})
    write_json(tmp_path / "run" / "profiler_info_0.json", {})
    other = write_json(tmp_path / "run" / "rank1.pt.trace.json", {"traceEvents": []})
    assert ascend_sources(
        [t, tmp_path / "run" / "communication.json", tmp_path / "run" / "profiler_info_0.json", other]
    ) == [t, other]


def test_a_named_kernel_details_csv_is_read_as_it_is_and_a_named_companion_goes_with_its_timeline(tmp_path):
    """``ingest …/kernel_details.csv`` reads that CSV, not the trace_view.json beside it; a
    communication.json named alone is no trace and still stands for its timeline."""
    t = write_json(tmp_path / "run" / "trace_view.json", small_trace())
    csv = write_kernel_details(tmp_path / "run" / "kernel_details.csv", [kd_row("k", "1000.0", "5.0")])
    comm = write_json(tmp_path / "run" / "communication.json", {})
    assert find_sources([csv]).files == [csv]
    assert find_sources([comm]).files == [t]
    assert find_sources([tmp_path / "run"]).files == [t]  # found in a folder: the rank's timeline


def test_rank_folder_with_nothing_to_read_is_a_one_line_error(tmp_path):
    root = tmp_path / "host_1_2_ascend_pt"
    write_json(root / "profiler_info_0.json", {})
    with pytest.raises(CorruptTrace) as e:
        ascend_sources([root / "profiler_info_0.json"])
    assert str(root) in str(e.value) and "\n" not in str(e.value)


def test_folder_facts_rank_host_and_ep(tmp_path):
    t = rank_folder(tmp_path, "node7_4242_20250101_ascend_pt", small_trace())
    write_json(tmp_path / "node7_4242_20250101_ascend_pt" / "profiler_info_5.json", {"rank_id": 5})
    facts = folder_facts(find_companions(t))
    assert (facts.rank, facts.source, facts.host, facts.ep) == (5, "profiler_info", "node7", None)
    t2 = rank_folder(tmp_path, "dp0_pp0_tp1_ep9_rank9_ascend_pt", small_trace())
    assert folder_facts(find_companions(t2)).ep == 9


# ---------------------------------------------------------------- bad input


def _one_line(err: AsaptraceError, path: Path) -> None:
    assert str(path) in str(err) and "\n" not in str(err)


def test_truncated_timeline(tmp_path):
    t = rank_folder(tmp_path, "r_ascend_pt", small_trace())
    t.write_bytes(t.read_bytes()[:-40])
    with pytest.raises(CorruptTrace) as e:
        read_ascend(t)
    _one_line(e.value, t)


def test_kernel_details_without_required_columns(tmp_path):
    t = rank_folder(tmp_path, "r_ascend_pt", small_trace())
    kd = write_kernel_details(t.parent / "kernel_details.csv", [["a", "1"]], header=["Name", "Type"])
    with pytest.raises(CorruptTrace) as e:
        read_ascend(t)
    _one_line(e.value, kd)
    assert "Start Time(us)" in str(e.value)


def test_communication_json_that_is_not_json(tmp_path):
    t = rank_folder(tmp_path, "r_ascend_pt", small_trace())
    bad = t.parent / "communication.json"
    bad.write_text('{"step": {"collective": ')
    with pytest.raises(CorruptTrace) as e:
        read_ascend(t)
    _one_line(e.value, bad)


def test_malformed_communication_ops_are_counted(tmp_path):
    comm = {
        "step": {"collective": {"hcom_x__1": {"no time info": 1}, "hcom_y__2": comm_op(None, 1, 1, 0, 0)}}
    }
    r = read_ascend(rank_folder(tmp_path, "r_ascend_pt", small_trace(), communication=comm))
    assert r.accounting.rejected["communication_json_malformed"] == 1
    assert r.accounting.rejected["communication_json_unmatched"] == 1  # no start time, not on the timeline


# ---------------------------------------------------------------- the real sample


@pytest.fixture(scope="module")
def sample(shared_data):
    folder = shared_data / "traces" / "ascend-sample"
    raw = json.loads((folder / "trace_view.json").read_text())
    return folder, raw, read_ascend(folder / "trace_view.json")


def _ns(ts: str | float) -> int:
    return int(Decimal(str(ts)) * 1000)


def test_sample_is_detected_as_ascend_although_its_process_names_come_late(sample):
    folder, _, _ = sample
    head = (folder / "trace_view.json").read_bytes()[:65536]
    assert b"Ascend Hardware" not in head and b"CANN" not in head  # what a head-only sniffer sees
    assert detect_format(folder / "trace_view.json").name == "ascend"


def test_sample_processes_streams_and_kinds(sample):
    _, raw, r = sample
    proc = {e["pid"]: e["args"]["name"] for e in raw if e["ph"] == "M" and e["name"] == "process_name"}
    per_proc = Counter(proc[e["pid"]] for e in raw if e["ph"] == "X")
    assert per_proc == {"Python": 1007, "CANN": 382, "Ascend Hardware": 276, "Overlap Analysis": 547}
    ev = _events(r)
    dev = ev.filter(pl.col("is_device"))
    hw_raw = [e for e in raw if e["ph"] == "X" and proc[e["pid"]] == "Ascend Hardware"]
    assert dev.height == len(hw_raw) == 276
    assert sorted(zip(dev["name"], dev["ts_ns"], dev["stream"], strict=True)) == sorted(
        (e["name"], _ns(e["ts"]), e["tid"]) for e in hw_raw
    )
    assert Counter(ev["kind"]) == {"compute": 276, "annotation": 547, "host": 1007 + 382}
    names = set(dev["name"])
    assert {
        "aclnnInplaceZero_ZerosLikeAiCore_ZerosLike",
        "MEMCPY_ASYNC",
        "aclnnReduceSum_CastAiCpu_Cast",
    } <= names


def test_sample_launch_links_match_the_host_to_device_arrows(sample):
    _, raw, r = sample
    ev = _events(r)
    x = [e for e in raw if e["ph"] == "X"]
    by_id: dict[str, dict[str, dict]] = {}
    for e in raw:
        if e["ph"] in ("s", "f") and e.get("cat") == "HostToDevice":
            by_id.setdefault(str(e["id"]), {})[e["ph"]] = e
    assert len(by_id) == 274
    key = {(n, t, s): c for n, t, s, c in ev.select("name", "ts_ns", "stream", "corr").iter_rows()}
    for pair in by_id.values():
        s, f = pair["s"], pair["f"]
        task = next(e for e in x if e["pid"] == f["pid"] and e["tid"] == f["tid"] and e["ts"] == f["ts"])
        # the launching CANN call: the innermost slice of the arrow's thread enclosing its start
        host = min(
            (
                e
                for e in x
                if e["pid"] == s["pid"]
                and e["tid"] == s["tid"]
                and _ns(e["ts"]) <= _ns(s["ts"]) <= _ns(e["ts"]) + _ns(e["dur"])
            ),
            key=lambda e: e["dur"],
        )
        c_task = key[(task["name"], _ns(task["ts"]), task["tid"])]
        assert c_task is not None and c_task == key[(host["name"], _ns(host["ts"]), host["tid"])]
    assert ev.filter(pl.col("is_device") & pl.col("corr").is_not_null()).height == 274


def test_sample_accounting_and_the_kernel_details_of_another_run(sample):
    folder, raw, r = sample
    rows = (folder / "kernel_details.csv").read_text().splitlines()[1:]
    csv_first = min(int(Decimal(line.split('"')[1].strip()) * 1000) for line in rows)
    trace_last = max(_ns(e["ts"]) + _ns(e["dur"]) for e in raw if e["ph"] == "X")
    assert csv_first - trace_last > 86400 * 10**9  # the CSV was recorded on another day
    acc = r.accounting
    assert acc.read == len(raw) + len(rows)
    assert acc.rejected == {"kernel_details_outside_timeline": len(rows)}
    assert acc.kept["events"] == sum(e["ph"] == "X" for e in raw)
    assert acc.read == acc.kept_total + acc.rejected_total
