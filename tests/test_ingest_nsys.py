"""Nsight Systems SQLite ingest: the real sample (expected values queried from it with raw sqlite3),
hand-built exports of another schema version, and bad input."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from asaptrace.errors import AsaptraceError, CorruptTrace, UnsupportedFormat
from asaptrace.ingest import detect_format
from asaptrace.ingest.driver import ingest_paths
from asaptrace.ingest.nsys import read_nsys
from tests._ingest_helpers import global_tid, nsys_db

SAMPLE = ("traces", "nsys-sample", "saxpy-mpi-cuda_nsys_perlmutter0.sqlite")


def _events(result) -> pl.DataFrame:
    return pl.from_arrow(result.events).with_columns(pl.col("name", "kind", "cat").cast(pl.String))


@pytest.fixture(scope="module")
def sample(shared_data):
    path = shared_data.joinpath(*SAMPLE)
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    conn.text_factory = bytes  # the export's environment table holds invalid UTF-8
    yield path, conn, read_nsys(path)
    conn.close()


def _q(conn, sql):
    return [tuple(v.decode() if isinstance(v, bytes) else v for v in row) for row in conn.execute(sql)]


def test_sample_kernels_with_device_stream_names_and_times(sample):
    _path, conn, r = sample
    (base,) = _q(conn, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0]
    raw = _q(
        conn,
        "SELECT s.value, k.start, k.end, k.deviceId, k.streamId, k.correlationId "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName",
    )
    ev = _events(r)
    got = ev.filter(pl.col("cat") == "kernel").select("name", "ts_ns", "dur_ns", "pid", "stream", "corr")
    assert sorted(got.rows()) == sorted((n, s + base, e - s, d, st, c) for n, s, e, d, st, c in raw)
    assert len(raw) == 5 and {row[0] for row in raw} == {"saxpy(double *, double *, double *, double, int)"}
    assert set(ev.filter(pl.col("cat") == "kernel")["kind"]) == {"compute"}


def test_sample_memcpy_runtime_and_nvtx_counts(sample):
    _, conn, r = sample
    ev = _events(r)
    kinds = dict(_q(conn, "SELECT copyKind, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1"))
    assert Counter(ev.filter(pl.col("cat") == "gpu_memcpy")["name"]) == {
        "Memcpy HtoD": kinds[1],
        "Memcpy DtoH": kinds[2],
    }
    (n_rt,) = _q(conn, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0]
    rt = ev.filter(pl.col("cat") == "cuda_runtime")
    assert rt.height == n_rt == 95 and set(rt["kind"]) == {"host"} and not rt["is_device"].any()
    (g,) = _q(conn, "SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0]
    assert set(rt["pid"]) == {(g >> 24) & 0xFFFFFF} and set(rt["stream"]) == {g & 0xFFFFFF}
    ranges = _q(
        conn,
        "SELECT coalesce(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s "
        "ON s.id = n.textId WHERE n.eventType = 59",
    )
    nv = ev.filter(pl.col("cat") == "nvtx")
    assert Counter(nv["name"]) == Counter(x for (x,) in ranges)
    assert {"MPI_Send", "MPI_Recv", "saxpy", "MPI_Init"} <= set(nv["name"]) and set(nv["kind"]) == {
        "annotation"
    }


def test_sample_kernels_link_to_their_launch_calls(sample):
    _, conn, r = sample
    ev = _events(r)
    launches = {
        c
        for (c,) in _q(
            conn,
            "SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
            "ON s.id = r.nameId WHERE s.value LIKE 'cudaLaunchKernel%'",
        )
    }
    kernel_corr = set(ev.filter(pl.col("cat") == "kernel")["corr"])
    assert kernel_corr == launches
    host = ev.filter((pl.col("cat") == "cuda_runtime") & pl.col("corr").is_in(list(kernel_corr)))
    assert set(host["name"]) == {"cudaLaunchKernel", "cudaLaunchKernel_v7000"}


def test_sample_accounting_rank_and_streams(sample):
    _path, conn, r = sample
    tables = (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "NVTX_EVENTS",
    )
    total = sum(_q(conn, f"SELECT count(*) FROM {t}")[0][0] for t in tables)
    acc = r.accounting
    assert acc.read == total == 139
    meta = _q(conn, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (39, 75)")[0][0]
    assert acc.kept["metadata"] == meta == 2 and acc.rejected_total == 0
    assert acc.read == acc.kept_total + acc.rejected_total
    # nsys' MPI tracing names the thread "MPI Rank 0"; PMI_SIZE=2 in the recorded launch environment
    (thread,) = _q(conn, "SELECT text FROM NVTX_EVENTS WHERE eventType = 39")[0]
    assert thread == "MPI Rank 0"
    assert (r.rank_info.rank, r.rank_info.source, r.rank_info.world_size, r.rank_info.device) == (
        0,
        "nvtx",
        2,
        0,
    )
    (host,) = _q(conn, "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'")[0]
    assert r.rank_info.host == host
    streams = pl.from_arrow(r.streams)
    gpu = streams.filter(pl.col("is_device")).to_dicts()[0]
    (gpu_name,) = _q(conn, "SELECT name FROM TARGET_INFO_GPU")[0]
    assert (gpu["pid"], gpu["stream"], gpu["process_label"]) == (0, 7, gpu_name)
    assert streams.filter(~pl.col("is_device"))["thread_name"].to_list() == ["MPI Rank 0"]


def test_sample_through_the_driver(sample, tmp_path):
    path, _, r = sample
    assert detect_format(path).name == "nsys"
    store = ingest_paths([path], tmp_path / "store", jobs=1)
    ranks = store.read("ranks")
    assert ranks.select("rank", "format", "rank_source").rows() == [(0, "nsys", "nvtx")]
    assert store.meta["accounting"]["read"] == r.accounting.read


# ---------------------------------------------------------------- hand-built exports


STRINGS = {1: "flash_fwd_kernel", 2: "cudaLaunchKernel", 3: "layer#0", 4: "grouped_gemm"}
T = global_tid(4242, 4243)


def newer_export(path: Path, **kw) -> Path:
    """Schema 3.x: META_DATA_EXPORT, kernel names only in ``shortName``, an enum table."""
    return nsys_db(
        path,
        strings=STRINGS,
        kernels=[(1000, 1500, 2, 13, 7, 1), (2000, 1900, 2, 13, 8, 4)],  # the second ends before it starts
        runtime=[(900, 950, T, 7, 2)],
        memcpy=[(3000, 3100, 2, 14, 9, 8)],
        nvtx=[
            (800, 2600, 59, "prefill_step#0", None, T, 0),
            (1000, 1600, 59, None, 3, T, 0),  # name through textId
            (1200, None, 60, "unfinished", None, T, 0),  # start/end range never ended
            (1300, None, 34, "mark", None, T, 0),  # a mark: an instant
            (0, None, 75, "MyDomain", None, T, 4),  # domain creation: metadata
            (1400, 1450, 59, "in domain", None, T, 4),
            (1500, 1501, 62, "payload?", None, T, 0),  # a type we do not read
        ],
        enum_types={
            "NvtxMark": 34,
            "NvtxPushPopRange": 59,
            "NvtxStartEndRange": 60,
            "NvtxDomainCreate": 75,
            "NvtxThread": 39,
            "NvtxCategory": 33,
            "NvtxDomainDestroy": 76,
        },
        **kw,
    )


def test_newer_schema_names_nvtx_kinds_and_rejections(tmp_path):
    r = read_nsys(newer_export(tmp_path / "run_rank5.sqlite"))
    ev = _events(r)
    rows = {
        n: (ts, dur, kind) for n, ts, dur, kind in ev.select("name", "ts_ns", "dur_ns", "kind").iter_rows()
    }
    assert rows["flash_fwd_kernel"] == (1000, 500, "compute")
    assert rows["Memcpy DtoD"] == (3000, 100, "memcpy")
    assert rows["cudaLaunchKernel"] == (900, 50, "host")
    assert rows["prefill_step#0"] == (800, 1800, "annotation") and rows["layer#0"] == (
        1000,
        600,
        "annotation",
    )
    assert rows["mark"] == (1300, 0, "annotation")
    assert "grouped_gemm" not in rows and "unfinished" not in rows
    acc = r.accounting
    assert acc.rejected == {"negative_dur": 1, "nvtx_unterminated_range": 1, "nvtx_event_type:62": 1}
    assert acc.read == 2 + 1 + 1 + 7 and acc.kept["metadata"] == 1
    assert acc.read == acc.kept_total + acc.rejected_total
    args = pl.from_arrow(r.args)
    in_dom = ev.filter(pl.col("name") == "in domain")["eid"].item()
    assert json.loads(args.filter(pl.col("eid") == in_dom)["extra"].item()) == {"nvtx_domain": "MyDomain"}
    k = ev.filter(pl.col("name") == "flash_fwd_kernel").to_dicts()[0]
    assert (k["pid"], k["stream"], k["is_device"], k["corr"]) == (2, 13, True, 7)
    assert r.rank_info.rank is None  # no rank in the file: the driver reads "rank5" from the name


def test_rank_from_the_recorded_launch_environment(tmp_path):
    r = read_nsys(newer_export(tmp_path / "a.sqlite", env="PATH=/bin\x00RANK=5\x00WORLD_SIZE=8"))
    assert (r.rank_info.rank, r.rank_info.source, r.rank_info.world_size) == (5, "env:RANK", 8)


def test_older_schema_with_demangled_names_and_no_version(tmp_path):
    p = nsys_db(
        tmp_path / "old.sqlite",
        strings=STRINGS,
        kernels=[(10, 20, 0, 7, 1, 1)],
        version=None,
        name_column="demangledName",
    )
    r = read_nsys(p)
    assert _events(r)["name"].to_list() == ["flash_fwd_kernel"] and r.notes["export_schema_version"] is None


# ---------------------------------------------------------------- bad input


def _one_line(err: AsaptraceError, path: Path) -> None:
    assert str(path) in str(err) and "\n" not in str(err)


def test_sqlite_that_is_not_an_nsys_export(tmp_path):
    p = tmp_path / "app.db"
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(UnsupportedFormat) as e:
        read_nsys(p)
    _one_line(e.value, p)
    assert "not an Nsight Systems export" in str(e.value)
    with pytest.raises(UnsupportedFormat) as e:
        detect_format(p)
    _one_line(e.value, p)


def test_unknown_export_schema_version(tmp_path):
    p = newer_export(tmp_path / "future.sqlite", version="9.0.0")
    with pytest.raises(UnsupportedFormat) as e:
        read_nsys(p)
    _one_line(e.value, p)
    assert "9.0.0" in str(e.value)


def test_kernel_table_missing_a_column(tmp_path):
    p = newer_export(tmp_path / "x.sqlite")
    conn = sqlite3.connect(p)
    conn.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN streamId")
    conn.commit()
    conn.close()
    with pytest.raises(CorruptTrace) as e:
        read_nsys(p)
    _one_line(e.value, p)
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in str(e.value) and "streamId" in str(e.value)


def test_truncated_database(tmp_path):
    full = newer_export(tmp_path / "full.sqlite")
    p = tmp_path / "cut.sqlite"
    p.write_bytes(full.read_bytes()[:5000])
    with pytest.raises(AsaptraceError) as e:
        read_nsys(p)
    _one_line(e.value, p)


def test_not_sqlite_at_all(tmp_path):
    p = tmp_path / "report.sqlite"
    p.write_text("this is an nsys-rep, not an export\n")
    with pytest.raises(UnsupportedFormat) as e:
        read_nsys(p)
    _one_line(e.value, p)
