"""A big rank's plain host rows written in chunks (asaptrace.ingest.kineto.split, .enrich.host_chunks)
give the store the whole rank gives.

The reader keeps a big file's plain host rows out of its tables and writes them in chunks; the
enrichment gives them their step from the annotation spans and merges them back, in event-id
order, into the rank's one part per table. Checked three ways: the reader's tables plus its chunks
are the whole read's tables; a store built with chunks is the store built without, table for
table; and hand-worked answers (a host op inside ``ProfilerStep#3`` is in step 3, a kernel takes
the step of the launch that issued it, even when its launch is in a chunk). What the reader
learns only at the end of the file (the GPU pids, the base time) sends it back to the usual read.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from asaptrace.ingest.base import IngestOptions
from asaptrace.ingest.kineto import cscan
from asaptrace.ingest.kineto.reader import read_kineto
from asaptrace.pipeline import build_store
from asaptrace.schema import conform
from asaptrace.store import TraceStore
from tests._kineto_helpers import cpu_op, gpu_process, kernel

pytestmark = pytest.mark.skipif(not cscan.available(), reason="the C scanner _kscan is not built")

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
TABLES = ("events", "args", "flows", "streams", "ranks", "batches")


def _rows(df: pl.DataFrame) -> pl.DataFrame:
    df = df.with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String))
    return df.sort(df.columns, nulls_last=True)


def _in_pieces(monkeypatch, piece_mb: float = 0.002) -> None:
    monkeypatch.setenv("ASAPTRACE_PIECEWISE_MB", "0")
    monkeypatch.setenv("ASAPTRACE_PIECE_MB", str(piece_mb))


def _whole(monkeypatch) -> None:
    monkeypatch.delenv("ASAPTRACE_PIECEWISE_MB", raising=False)
    monkeypatch.delenv("ASAPTRACE_PIECE_MB", raising=False)


def _read_both(path: Path, tmp_path: Path, monkeypatch, piece_mb: float = 0.002):
    _whole(monkeypatch)
    whole = read_kineto(path)
    _in_pieces(monkeypatch, piece_mb)
    split = read_kineto(path, IngestOptions(chunk_dir=str(tmp_path / "chunks")))
    return whole, split


def _joined(split, name: str) -> pl.DataFrame:
    tables = [conform(getattr(split, name), name)]
    if split.host_chunks is not None:
        for i in range(len(split.host_chunks.chunks)):
            tables.append(conform(split.host_chunks.read(i, name), name))
    return pl.concat([pl.from_arrow(t) for t in tables], how="vertical_relaxed")  # type: ignore[misc]


def _same_reads(whole, split) -> None:
    for name in ("events", "args", "flows"):
        assert _rows(pl.from_arrow(conform(getattr(whole, name), name))).equals(
            _rows(_joined(split, name))
        ), name
    assert _rows(pl.from_arrow(whole.streams)).equals(_rows(pl.from_arrow(split.streams)))
    assert whole.accounting == split.accounting
    assert whole.rank_info == split.rank_info and whole.notes == split.notes


def _step_trace(
    steps: int = 4,
    ops: int = 30,
    *,
    tail: dict | None = None,
    extra: list | None = None,
    step_cat: str = "user_annotation",
) -> dict:
    """A rank of ``steps`` ``ProfilerStep#N`` spans (of category ``step_cat``), each with ``ops``
    host ops, a launch and its kernel (same correlation id) per op, and a B/E pair across the whole
    run; base time at the end."""
    events: list[dict] = [
        {"ph": "B", "name": "run", "pid": 100, "tid": 100, "cat": "user_annotation", "ts": 0}
    ]
    t = 10
    for s in range(steps):
        start = t
        for k in range(ops):
            corr = s * 1000 + k
            events.append(cpu_op(f"aten::op{k % 7}", t, 8))
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 100,
                    "tid": 100,
                    "ts": t + 1,
                    "dur": 2,
                    "args": {"correlation": corr},
                }
            )
            events.append(kernel(f"gemm_{k % 5}", t + 50, 20, corr=corr))
            t += 10
        events.append(
            {
                "ph": "X",
                "cat": step_cat,
                "name": f"ProfilerStep#{s + 3}",
                "pid": 100,
                "tid": 100,
                "ts": start - 1,
                "dur": t - start + 1,
            }
        )
        t += 200
    events.append(cpu_op("outside_any_step", t + 5, 3))
    events.append({"ph": "E", "name": "run", "pid": 100, "tid": 100, "ts": t + 100})
    events += gpu_process(0) + (extra or [])
    return {"schemaVersion": 1, "traceEvents": events, **(tail or {"baseTimeNanoseconds": 1_000_000})}


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_split_read_gives_the_whole_reads_rows(tmp_path, monkeypatch):
    path = _write(tmp_path / "rank.json", _step_trace())
    whole, split = _read_both(path, tmp_path, monkeypatch)
    assert split.host_chunks is not None and len(split.host_chunks.chunks) > 5
    # the chunks hold the plain host ops and launches; the tables keep kernels, annotations, B/E
    assert split.host_chunks.rows == 4 * 30 * 2 + 1
    assert set(split.events.column("cat").to_pylist()) == {"kernel", "user_annotation"}
    _same_reads(whole, split)


@pytest.mark.parametrize(
    "name",
    [
        "kineto-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json",
        "kineto-hta-samples/nccl_data.json.gz",
        "kineto-hta-samples/sampled_rank-0.json.gz",
        "tracelens-serving/sglang_Qwen3-8B_prefilldecode.json.gz",
        "tracelens-serving/vllm_prefilldecode_piecewise_graph_execution.json.gz",
    ],
)
def test_real_traces_split_give_the_whole_reads_rows(tmp_path, monkeypatch, name):
    matches = list(SHARED.glob(f"**/{Path(name).name}"))
    if not matches:
        pytest.skip(f"{name} not in ../shared/data (the real traces are not bundled)")
    whole, split = _read_both(matches[0], tmp_path, monkeypatch, piece_mb=0.05)
    assert split.host_chunks is not None and split.host_chunks.rows > 0
    _same_reads(whole, split)


def _stores(paths: list[Path], tmp_path: Path, monkeypatch) -> tuple[TraceStore, TraceStore]:
    _whole(monkeypatch)
    whole = build_store(paths, tmp_path / "whole.store")
    _in_pieces(monkeypatch)
    split = build_store(paths, tmp_path / "split.store")
    return whole, split


def _same_stores(a: TraceStore, b: TraceStore) -> None:
    for name in TABLES:
        assert _rows(a.read(name)).equals(_rows(b.read(name))), name
    skip = {"files", "asaptrace_version"}
    assert {k: v for k, v in a.meta.items() if k not in skip} == {
        k: v for k, v in b.meta.items() if k not in skip
    }


def test_store_built_from_chunks_is_the_whole_ranks_store(tmp_path, monkeypatch):
    path = _write(tmp_path / "rank.json", _step_trace())
    whole, split = _stores([path], tmp_path, monkeypatch)
    _same_stores(whole, split)
    # one part per table, rows in event-id order, and no chunk left behind
    assert [p.name for p in split.parts("events")] == ["part-00000.parquet"]
    eid = split.read("events").get_column("eid")
    assert eid.is_sorted() and eid.n_unique() == eid.len()
    assert not any(p.name.startswith(".") for p in split.path.iterdir())
    ev = split.read("events").with_columns(pl.col("name").cast(pl.String))
    # hand-worked: the k-th step span is ProfilerStep#(k+3); its host ops, its launches (written
    # in chunks) and the kernels those launches issued (run after the span ends) are in that step
    ops = ev.filter(pl.col("name").str.starts_with("aten::op")).sort("ts_ns")
    assert ops.get_column("step").to_list() == [s + 3 for s in range(4) for _ in range(30)]
    kernels = ev.filter(pl.col("name").str.starts_with("gemm_")).sort("ts_ns")
    assert kernels.get_column("step").to_list() == [s + 3 for s in range(4) for _ in range(30)]
    assert ev.filter(pl.col("name") == "outside_any_step").get_column("step").to_list() == [None]


def test_an_operator_profiler_step_stays_out_of_the_chunks_and_cuts_the_steps(tmp_path, monkeypatch):
    """Older Kineto writes ``ProfilerStep#N`` as an ``Operator``, a host category whose rows go to
    chunks: the step spans must stay where the enrichment reads them, so the steps are the same."""
    path = _write(tmp_path / "rank.json", _step_trace(step_cat="Operator"))
    whole, split = _stores([path], tmp_path, monkeypatch)
    _same_stores(whole, split)
    ev = split.read("events").with_columns(pl.col("name").cast(pl.String))
    kernels = ev.filter(pl.col("name").str.starts_with("gemm_")).sort("ts_ns")
    assert kernels.get_column("step").to_list() == [s + 3 for s in range(4) for _ in range(30)]
    assert split.meta["segmentation"]["step_source"] == "annotations"


def test_real_rank_store_from_chunks_is_the_whole_ranks_store(tmp_path, monkeypatch):
    paths = sorted((SHARED / "kineto-dlrm-8rank").glob("worker[01]_*.json"))
    if not paths:
        pytest.skip("kineto-dlrm-8rank not in ../shared/data (the real traces are not bundled)")
    whole, split = _stores(paths, tmp_path, monkeypatch)
    _same_stores(whole, split)
    assert whole.read("flows").equals(split.read("flows"))  # in the file's order too


def _other_thread_launches(doc: dict) -> dict:
    """``doc`` with, in each ``ProfilerStep`` span, a launch on a thread of its own (tid 200, as the
    autograd engine's: no span around it there) whose kernel runs after the span has ended, in
    the idle gap before the next step."""
    events = list(doc["traceEvents"])
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    for k, span in enumerate(steps):
        corr, mid, end = 90_000 + k, span["ts"] + span["dur"] // 2, span["ts"] + span["dur"]
        launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 200}
        events.append({**launch, "ts": mid, "dur": 2, "args": {"correlation": corr}})
        events.append(kernel("bwd_gemm", end + 50, 20, corr=corr))
    return {**doc, "traceEvents": events}


def test_a_kernel_launched_off_the_steps_thread_takes_its_launchs_step_from_a_chunk(tmp_path, monkeypatch):
    # the launch sits in a chunk with no span around it on its own thread, so the kernel's step
    # comes from the step span on its rank that holds the launch's start (segment's rule 3c), not
    # from the kernel's own start, which falls between two steps
    path = _write(tmp_path / "rank.json", _other_thread_launches(_step_trace()))
    whole, split = _stores([path], tmp_path, monkeypatch)
    _same_stores(whole, split)
    ev = split.read("events").with_columns(pl.col("name").cast(pl.String))
    assert ev.filter(pl.col("name") == "bwd_gemm").sort("ts_ns").get_column("step").to_list() == [3, 4, 5, 6]


def test_host_rows_on_a_gpu_pid_send_the_file_back_to_the_usual_read(tmp_path, monkeypatch):
    # pid 100's host ops are device work once the metadata at the end labels pid 100 a GPU
    label = {"ph": "M", "name": "process_labels", "pid": 100, "tid": 0, "args": {"labels": "GPU 1"}}
    path = _write(tmp_path / "rank.json", _step_trace(extra=[label]))
    whole, split = _read_both(path, tmp_path, monkeypatch)
    assert split.host_chunks is None
    assert not (tmp_path / "chunks").exists()
    _same_reads(whole, split)
    ev = pl.from_arrow(split.events).with_columns(pl.col("name").cast(pl.String))  # type: ignore[union-attr]
    assert ev.filter(pl.col("name") == "aten::op0").get_column("is_device").all()


def test_a_base_time_past_int64_sends_the_file_back_to_the_usual_read(tmp_path, monkeypatch):
    path = _write(tmp_path / "rank.json", _step_trace(tail={"baseTimeNanoseconds": 2**63 - 1_000_000}))
    whole, split = _read_both(path, tmp_path, monkeypatch)
    assert split.host_chunks is None
    assert whole.accounting.rejected["bad_ts"] > 0  # the usual read rejects those rows: so does this one
    _same_reads(whole, split)


def _with_flows(doc: dict) -> dict:
    """``doc`` with a flow pair per launch and kernel (``s`` at the launch, ``f`` at the kernel, as
    Kineto writes them), a flow on a pid that is not an int (kept, but not a plain flow: it stays
    in the reader's tables), one without an id (``bad_flow``) and a run of 200 flows alone, in the
    middle of the events."""
    events: list[dict] = []
    for e in doc["traceEvents"]:
        events.append(e)
        corr = (e.get("args") or {}).get("correlation")
        if corr is None:
            continue
        ph = "s" if e["cat"] == "cuda_runtime" else "f"
        flow = {"ph": ph, "id": corr, "pid": e["pid"], "tid": e["tid"], "ts": e["ts"]}
        events.append({**flow, "cat": "ac2g", "name": "ac2g", **({"bp": "e"} if ph == "f" else {})})
    middle = len(events) // 2
    events[middle:middle] = [
        {
            "ph": "s",
            "id": 7_777,
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "ts": 15,
            "cat": "ac2g",
            "name": "odd",
        },
        {"ph": "f", "pid": 100, "tid": 100, "ts": 16, "cat": "ac2g", "name": "no id"},
        # a long run of flows alone (pieces that hold no host row, only flows)
        *(
            {"ph": "t", "id": 9_000 + k, "pid": 0, "tid": 7, "ts": 20 + k, "cat": "ac2g", "name": "run"}
            for k in range(200)
        ),
    ]
    return {**doc, "traceEvents": events}


def test_flows_in_chunks_give_the_whole_reads_flows_in_file_order(tmp_path, monkeypatch):
    path = _write(tmp_path / "rank.json", _with_flows(_step_trace()))
    whole, split = _read_both(path, tmp_path, monkeypatch)
    chunks = split.host_chunks
    assert chunks is not None
    # every launch's and kernel's flow is a plain flow, written in chunks; the flow on the named
    # pid stays in the tables, and its place in the file is known; the one without an id is
    # rejected by both reads alike
    assert chunks.flow_rows == 2 * 4 * 30 + 200
    assert any(c.rows == 0 and c.flow_rows for c in chunks.chunks)  # a chunk of flows alone
    assert split.flows.num_rows == 1 and len(chunks.rest_flows) == 1
    assert whole.accounting.rejected["bad_flow"] == 1
    _same_reads(whole, split)
    # the store's flows are the whole read's, row for row and in the file's order
    a, b = _stores([path], tmp_path, monkeypatch)
    _same_stores(a, b)
    assert a.read("flows").equals(b.read("flows"))
    assert [p.name for p in b.parts("flows")] == ["part-00000.parquet"]


def test_ingest_says_a_chunked_rank_cannot_keep_a_tiny_budget(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from asaptrace.cli import app

    monkeypatch.setenv("ASAPTRACE_PIECE_MB", "0.01")  # pieces of 10 KB: the file is over two

    path = _write(tmp_path / "rank.json", _step_trace(steps=40))
    res = CliRunner().invoke(app, ["ingest", str(path), "-o", str(tmp_path / "s"), "--memory-budget", "64K"])
    assert res.exit_code == 0, res.output
    assert "read in chunks but its device work held whole" in res.output
    assert (
        TraceStore.open(tmp_path / "s").read("events").height == 40 * (30 * 3 + 1) + 2
    )  # ops, launches, kernels, step spans; the pair, the last op


def test_chunks_made_in_worker_processes_give_the_same_store(tmp_path, monkeypatch):
    # the reader runs in a spawned worker: its chunks are files, and their handle comes back pickled
    paths = [_write(tmp_path / f"rank{r}.json", _step_trace(steps=2 + r)) for r in range(2)]
    _whole(monkeypatch)
    whole = build_store(paths, tmp_path / "whole.store")
    _in_pieces(monkeypatch)
    split = build_store(paths, tmp_path / "split.store", executor="process", jobs=2)
    _same_stores(whole, split)


def _split_reads(monkeypatch) -> list[str]:
    """The files the Kineto reader reads in pieces with chunks."""
    from asaptrace.ingest.kineto import reader

    got: list[str] = []
    real = reader.read_split

    def spy(path, *args, **kwargs):
        got.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(reader, "read_split", spy)
    return got


def test_a_lone_file_to_enrich_is_read_in_pieces_within_the_budget(tmp_path, monkeypatch):
    # a lone rank over LONE_FILE_PIECEWISE (here 4 KB) is read in pieces and chunks even though
    # its whole read keeps the 1 GiB budget: both cores on it, a third of the peak (memory.py)
    import asaptrace.memory as memory
    from asaptrace.ingest.kineto import prefetch

    _whole(monkeypatch)
    whole = build_store(
        [_write(tmp_path / "worker0.json", _with_flows(_step_trace()))], tmp_path / "whole.store"
    )
    monkeypatch.setattr(memory, "LONE_FILE_PIECEWISE", 4096)
    monkeypatch.setenv("ASAPTRACE_PIECE_MB", "0.001")  # the file is over two pieces
    got = _split_reads(monkeypatch)
    lone = build_store([tmp_path / "worker0.json"], tmp_path / "lone.store")
    assert got == ["worker0.json"]
    _same_stores(whole, lone)
    assert whole.read("flows").equals(lone.read("flows"))
    # not read ahead whole while the CLI imports: the pieces read it
    assert prefetch.start([tmp_path / "worker0.json"], max_bytes=2**30, enrich=True) == 0
    prefetch.clear()
    # without the enrichment (no chunks: the pieces would be joined whole) it is read whole
    build_store([tmp_path / "worker0.json"], tmp_path / "raw.store", enrich=False)
    assert got == ["worker0.json"]
    assert prefetch.start([tmp_path / "worker0.json"], max_bytes=2**30, enrich=False) == 1
    prefetch.clear()
    # and so is each of several files: they keep both cores busy already
    second = _write(tmp_path / "worker1.json", _with_flows(_step_trace(steps=3)))
    build_store([tmp_path / "worker0.json", second], tmp_path / "two.store")
    assert got == ["worker0.json"]
