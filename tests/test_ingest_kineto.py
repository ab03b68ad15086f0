"""Kineto ingester on hand-built traces: every expected value below is worked out by hand.

Every test runs once per decoder (the C scanner and msgspec): both must give these answers.
"""

from __future__ import annotations

import polars as pl
import pytest

from asaptrace.ingest.kineto import read_kineto
from tests._kineto_helpers import cpu_op, gpu_process, kernel, write_trace
from tests._kscan_helpers import kineto_decoder  # noqa: F401  (autouse: every test, both decoders)


def _events(result) -> pl.DataFrame:
    return pl.from_arrow(result.events).with_columns(
        pl.col("name").cast(pl.String), pl.col("kind").cast(pl.String)
    )


def test_times_int_float_string_are_exact_ns(tmp_path):
    f = write_trace(
        tmp_path / "t.json",
        [
            kernel("a", 1000, 5),  # int µs
            kernel("b", 1000.5, 2.25),  # float µs
            kernel("c", "1694128201435418.123", "7.001"),  # string µs, epoch magnitude: exact via Decimal
        ],
    )
    ev = _events(read_kineto(f)).sort("eid")
    assert ev["ts_ns"].to_list() == [1_000_000, 1_000_500, 1_694_128_201_435_418_123]
    assert ev["dur_ns"].to_list() == [5_000, 2_250, 7_001]


def test_base_time_is_added_and_display_unit_does_not_scale(tmp_path):
    # Kineto writes ts relative to baseTimeNanoseconds; displayTimeUnit is only a viewer hint.
    f = write_trace(
        tmp_path / "t.json",
        [kernel("a", 10.5, 2)],
        displayTimeUnit="ms",
        baseTimeNanoseconds=1_700_000_000_000_000_000,
    )
    r = read_kineto(f)
    ev = _events(r)
    assert ev["ts_ns"].to_list() == [1_700_000_000_000_010_500]
    assert ev["dur_ns"].to_list() == [2_000]
    assert r.notes["display_time_unit"] == "ms"


def test_begin_end_pairs_become_spans_and_orphans_are_rejected(tmp_path):
    events = [
        {"ph": "B", "name": "outer", "pid": 1, "tid": 1, "ts": 100},
        {"ph": "B", "name": "inner", "pid": 1, "tid": 1, "ts": 110},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 120},  # closes inner: 10 µs
        {"ph": "E", "pid": 1, "tid": 1, "ts": 150},  # closes outer: 50 µs
        {"ph": "B", "name": "never_closed", "pid": 1, "tid": 2, "ts": 200},
        {"ph": "E", "pid": 9, "tid": 9, "ts": 300},  # closes nothing
    ]
    r = read_kineto(write_trace(tmp_path / "t.json", events))
    ev = _events(r).sort("ts_ns")
    assert ev.select("name", "dur_ns").rows() == [("outer", 50_000), ("inner", 10_000)]
    assert r.accounting.read == 6
    assert r.accounting.kept["events"] == 4  # two B + two E folded into two spans
    assert r.accounting.rejected == {"unmatched_begin": 1, "unmatched_end": 1}


def test_phases_go_to_their_tables(tmp_path):
    events = [
        *gpu_process(0),
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        kernel("k", 10, 1, corr=42),
        {"ph": "i", "name": "mark", "pid": 100, "tid": 100, "ts": 12, "s": "t"},
        {"ph": "s", "id": 42, "cat": "ac2g", "name": "ac2g", "pid": 100, "tid": 100, "ts": 9},
        {"ph": "f", "id": 42, "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 7, "ts": 10, "bp": "e"},
        {"ph": "C", "name": "memory", "pid": 100, "tid": 100, "ts": 11, "args": {"bytes": 5}},
    ]
    r = read_kineto(write_trace(tmp_path / "t.json", events))
    ev = _events(r).sort("ts_ns")
    assert ev.select("name", "dur_ns").rows() == [("k", 1_000), ("mark", 0)]
    assert r.flows.num_rows == 2 and r.flows.column("flow_id").to_pylist() == ["42", "42"]
    assert r.accounting.kept == {"events": 2, "flows": 2, "metadata": 3}
    assert r.accounting.rejected == {"unsupported_phase:C": 1}
    streams = pl.from_arrow(r.streams)
    gpu = streams.filter(pl.col("pid") == 0, pl.col("stream") == 7).row(0, named=True)
    assert gpu["is_device"] and gpu["process_label"] == "GPU 0" and gpu["thread_name"] == "stream 7 "


def test_device_vs_host_from_category_and_old_names(tmp_path):
    events = [
        kernel("new", 1, 1, cat="kernel"),
        kernel("old", 2, 1, cat="Kernel"),
        kernel("copy", 3, 1, cat="gpu_memcpy"),
        cpu_op("aten::mm", 4, 1),
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": 5, "dur": 1},
        {"ph": "X", "cat": "Operator", "name": "aten::add", "pid": 100, "tid": 100, "ts": 6, "dur": 1},
    ]
    ev = _events(read_kineto(write_trace(tmp_path / "t.json", events))).sort("ts_ns")
    assert ev.select("name", "is_device", "kind").rows() == [
        ("new", True, "compute"),
        ("old", True, "compute"),
        ("copy", True, "memcpy"),
        ("aten::mm", False, "host"),
        ("cudaLaunchKernel", False, "host"),
        ("aten::add", False, "host"),
    ]


def test_unknown_category_on_a_gpu_process_is_device(tmp_path):
    events = [*gpu_process(3), kernel("mystery", 1, 1, pid=3, cat="new_gpu_thing")]
    ev = _events(read_kineto(write_trace(tmp_path / "t.json", events)))
    assert ev["is_device"].to_list() == [True]


def test_string_pids_and_tids_are_mapped_and_remembered(tmp_path):
    events = [
        {"ph": "X", "name": "span", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1, "dur": 2},
        {"ph": "X", "name": "op", "pid": 100, "tid": 7, "ts": 1, "dur": 2, "cat": "cpu_op"},
    ]
    r = read_kineto(write_trace(tmp_path / "t.json", events))
    ev = _events(r).sort("name")
    assert ev.filter(pl.col("name") == "op").select("pid", "stream").row(0) == (100, 7)
    span = ev.filter(pl.col("name") == "span").row(0, named=True)
    assert span["pid"] < 0 and span["stream"] < 0
    st = pl.from_arrow(r.streams).filter(pl.col("pid") == span["pid"]).row(0, named=True)
    assert (st["source_pid"], st["source_tid"]) == ("Spans", "PyTorch Profiler")


def test_bare_list_and_gzip(tmp_path):
    events = [kernel("a", 1, 1), kernel("b", 2, 1)]
    r1 = read_kineto(write_trace(tmp_path / "l.json", events, top="list"))
    r2 = read_kineto(write_trace(tmp_path / "g.json.gz", events, gz=True))
    assert _events(r1)["name"].to_list() == _events(r2)["name"].to_list() == ["a", "b"]
    assert r1.rank_info.rank is None and r2.rank_info.rank == 0


def test_correlation_and_collective_metadata_are_kept(tmp_path):
    events = [
        kernel(
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            10,
            5,
            corr=60047,
            **{
                "Collective name": "allreduce",
                "In msg nelems": 6637568,
                "Out msg nelems": 6637568,
                "Group size": 2,
                "dtype": "Float",
                "Process Group Ranks": "[0, 1]",
                "External id": 12945,
            },
        ),
        cpu_op(
            "aten::mm",
            1,
            3,
            **{"Input Dims": [[4, 8], [8, 2]], "Input type": ["float", "float"], "External id": 7},
        ),
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "layer#3",
            "pid": 0,
            "tid": 7,
            "ts": 9,
            "dur": 20,
            "args": {"step": 1, "layer": 3, "micro_batch": 0},
        },
    ]
    r = read_kineto(write_trace(tmp_path / "t.json", events))
    ev = _events(r)
    assert ev.filter(pl.col("name").str.starts_with("nccl"))["corr"].to_list() == [60047]
    args = pl.from_arrow(r.args).join(ev.select("eid", "name"), on="eid")
    nccl = args.filter(pl.col("name").str.starts_with("nccl")).row(0, named=True)
    assert (
        nccl["collective"],
        nccl["in_nelems"],
        nccl["group_size"],
        nccl["pg_ranks"],
        nccl["external_id"],
    ) == ("allreduce", 6637568, 2, "[0, 1]", 12945)
    mm = args.filter(pl.col("name") == "aten::mm").row(0, named=True)
    assert mm["input_dims"].replace(" ", "") == "[[4,8],[8,2]]" and mm["external_id"] == 7
    layer = args.filter(pl.col("name") == "layer#3").row(0, named=True)
    assert layer["extra"] is not None and '"layer":3' in layer["extra"]


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"ph": "X", "name": "k", "pid": 0, "tid": 7, "dur": 1}, "bad_ts"),
        ({"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 1}, "bad_ts"),
        ({"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 1}, "bad_dur"),
        ({"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": -3}, "negative_dur"),
        ({"ph": "X", "pid": 0, "tid": 7, "ts": 1, "dur": 1}, "missing_name"),
        ({"ph": "X", "name": 5, "pid": 0, "tid": 7, "ts": 1, "dur": 1}, "missing_name"),
        ({"ph": "X", "name": "k", "tid": 7, "ts": 1, "dur": 1}, "missing_pid_or_tid"),
        ({"name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1}, "missing_phase"),
        ({"ph": "X", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": [1, 2]}, "malformed_args"),
        ("not an object", "not_an_object"),
    ],
)
def test_defective_event_is_counted_not_fatal(tmp_path, event, reason):
    good = [kernel("ok1", 1, 1), kernel("ok2", 2, 1)]
    r = read_kineto(write_trace(tmp_path / "t.json", [good[0], event, good[1]]))
    assert _events(r)["name"].to_list() == ["ok1", "ok2"]
    assert r.accounting.read == 3
    assert dict(r.accounting.rejected) == {reason: 1}
