"""Files read on threads: the same store as one after the other, bounded by --jobs and by memory."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from asaptrace.executors import ThreadExecutor, default_threads
from asaptrace.pipeline import build_store
from asaptrace.store import TraceStore
from tests.conftest import SAMPLES


def _tables(store: TraceStore) -> dict[str, object]:
    """Every Parquet file of the store, read whole (rows, columns, types, dictionaries, order)."""
    return {rel: pq.read_table(store.path / rel) for rel in store.meta["files"]}


def _same_store(a: TraceStore, b: TraceStore) -> None:
    assert list(a.meta["files"]) == list(b.meta["files"])  # same parts, same names, same rows
    ta, tb = _tables(a), _tables(b)
    for rel in ta:
        assert ta[rel].equals(tb[rel]), rel
    strip = {"files"}
    assert {k: v for k, v in a.meta.items() if k not in strip} == {
        k: v for k, v in b.meta.items() if k not in strip
    }


@pytest.mark.parametrize("folder", ["coupled", "dlrm"])
def test_threads_build_the_store_the_serial_ingest_builds(folder, tmp_path, shared_data):
    src = (
        SAMPLES / "coupled" / "kineto"
        if folder == "coupled"
        else shared_data / "traces" / "kineto-dlrm-8rank"
    )
    serial = build_store([src], tmp_path / "serial", jobs=1)
    threads = build_store([src], tmp_path / "threads", jobs=4)  # more threads than cores: more interleaving
    assert serial.ranks().collect().height == (32 if folder == "coupled" else 8)
    assert sum(json.loads((tmp_path / "serial" / "meta.json").read_text())["files"].values()) > 10_000
    _same_store(serial, threads)


@dataclass(frozen=True)
class _Item:
    n: int
    memory_bytes: int


class _Recorder:
    """A task that holds its item for a while and records what ran beside it."""

    def __init__(self, budget: int, hold: float = 0.05) -> None:
        self.lock = threading.Lock()
        self.budget = budget
        self.running: dict[int, int] = {}
        self.over_budget: list[dict[int, int]] = []  # moments when several ran over the budget
        self.peak_count = 0
        self.started: list[int] = []
        self.hold = hold

    def __call__(self, item: _Item) -> int:
        with self.lock:
            self.started.append(item.n)
            self.running[item.n] = item.memory_bytes
            if len(self.running) > 1 and sum(self.running.values()) > self.budget:
                self.over_budget.append(dict(self.running))
            self.peak_count = max(self.peak_count, len(self.running))
        time.sleep(self.hold)
        with self.lock:
            del self.running[item.n]
        if item.n == 99:
            raise ValueError("bad file")
        return item.n


def test_memory_budget_bounds_what_runs_at_once():
    # budget 100: 60 and 60 cannot run together, 60 + 30 can; 150 is over the budget alone and
    # still runs (alone), so no file is refused for its size
    items = [_Item(0, 60), _Item(1, 60), _Item(2, 30), _Item(3, 150), _Item(4, 10)]
    rec = _Recorder(budget=100)
    got = list(ThreadExecutor(jobs=4, memory=100).map(rec, items))
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert rec.over_budget == [] and rec.peak_count == 2
    assert rec.started[0] == 0  # the first file is started first


def test_jobs_bounds_the_threads():
    rec = _Recorder(budget=10**9)
    got = list(ThreadExecutor(jobs=2, memory=10**9).map(rec, [_Item(i, 1) for i in range(6)]))
    assert sorted(got) == list(range(6)) and rec.peak_count == 2


def test_the_first_error_stops_the_run():
    rec = _Recorder(budget=10**9, hold=0.02)
    items = [_Item(99, 1)] + [_Item(i, 1) for i in range(1, 20)]
    with pytest.raises(ValueError, match="bad file"):
        list(ThreadExecutor(jobs=2, memory=10**9).map(rec, items))
    assert len(rec.started) <= 4  # the failing one, the one beside it, at most the next pair


def test_default_threads_one_per_cpu_and_file():
    assert default_threads(8, cpus=2) == 2
    assert default_threads(1, cpus=64) == 1
    assert default_threads(3, cpus=64) == 3
    assert default_threads(0, cpus=2) == 1


def test_the_cli_reads_a_folder_on_threads_by_default(tmp_path, monkeypatch):
    seen: list[int] = []
    real = ThreadExecutor.map

    def spy(self, fn, items):
        seen.append(len(items))
        return real(self, fn, items)

    monkeypatch.setattr(ThreadExecutor, "map", spy)
    from tests._cli import run_cli

    run = run_cli("ingest", SAMPLES / "coupled" / "kineto", "-o", tmp_path / "s", "--no-enrich")
    assert run.code == 0, run
    assert seen == [32]
    assert TraceStore.open(tmp_path / "s").ranks().collect().height == 32
    assert Path(tmp_path / "s").is_dir()


@pytest.mark.parametrize("held", ["none", "half"])
def test_raw_parts_held_in_memory_or_written_build_the_same_store(held, tmp_path, monkeypatch):
    # an ingest holds its raw tables in memory for the enrichment while they fit its budget, and
    # writes the rest: whatever the split, the store is the one built from written parts only
    import asaptrace.ingest.driver as driver

    src = SAMPLES / "coupled" / "kineto"
    everything = build_store([src], tmp_path / "held", jobs=2)
    files = sorted(src.glob("*.json*"))
    budget = 0 if held == "none" else sum(f.stat().st_size for f in files[: len(files) // 2]) // 2
    monkeypatch.setattr(driver, "hold_budget", lambda: budget)
    seen: list[int] = []
    real = driver.StoreWriter.hold_part
    monkeypatch.setattr(driver.StoreWriter, "hold_part", lambda self, *a: (seen.append(1), real(self, *a))[1])
    other = build_store([src], tmp_path / held, jobs=2)
    assert (len(seen) > 0) == (held == "half") and len(seen) < 3 * len(files)
    _same_store(everything, other)


def _spy_early(monkeypatch) -> list[int]:
    """How many ranks' early first pass each enrichment used."""
    from asaptrace.enrich.streaming import EarlyPass

    used: list[int] = []
    real = EarlyPass.take

    def take(self, tax):
        out = real(self, tax)
        used.append(len(out))
        return out

    monkeypatch.setattr(EarlyPass, "take", take)
    return used


def test_the_early_first_pass_builds_the_same_store(tmp_path, monkeypatch):
    # ranks are segmented on the reader threads as their files are read (only ranks that are a
    # group of their own: every rank, with a group budget of one event); the store must be the
    # one the usual first pass builds
    from asaptrace.enrich import streaming

    monkeypatch.setattr(streaming, "GROUP_EVENTS", 1)
    src = SAMPLES / "coupled" / "kineto"
    used = _spy_early(monkeypatch)
    early = build_store([src], tmp_path / "early", jobs=2)
    assert used == [32]
    monkeypatch.setattr(streaming.EarlyPass, "add", lambda self, *a: None)
    usual = build_store([src], tmp_path / "usual", jobs=2)
    assert used == [32, 0]
    _same_store(early, usual)


def test_an_early_pass_made_with_the_wrong_taxonomy_is_dropped(tmp_path, monkeypatch):
    # rank 0 runs no DeepEP kernel, rank 1 does: the taxonomy guessed from the first file read
    # (rank 0, files read one after the other) lacks the DeepEP rules the whole run selects, so
    # the early results are dropped and rank 1's dispatch kernel still gets its DeepEP kind
    from asaptrace.enrich import streaming
    from tests._kineto_helpers import gpu_process, kernel, write_trace

    monkeypatch.setattr(streaming, "GROUP_EVENTS", 1)
    plain = [
        kernel("ncclDevKernel_AllReduce_RING_LL", 10, 5, corr=1),
        kernel("flash_fwd_kernel", 20, 30, corr=2),
    ]
    deep = [
        kernel("void deep_ep::internode::dispatch<8>(int*)", 10, 5, corr=1),
        kernel("flash_fwd_kernel", 20, 30, corr=2),
    ]
    src = tmp_path / "in"
    write_trace(src / "rank0.json", gpu_process() + plain, rank=0)
    write_trace(src / "rank1.json", gpu_process() + deep, rank=1)
    used = _spy_early(monkeypatch)
    store = build_store([src], tmp_path / "s", jobs=1)
    assert used == [0]
    kinds = dict(
        store.read("events")
        .filter(pl.col("rank") == 1)
        .select(pl.col("name").cast(pl.String), pl.col("kind").cast(pl.String))
        .iter_rows()
    )
    assert kinds["void deep_ep::internode::dispatch<8>(int*)"] == "dispatch"
    monkeypatch.setattr(streaming.EarlyPass, "add", lambda self, *a: None)
    _same_store(store, build_store([src], tmp_path / "usual", jobs=1))


def test_an_error_in_the_early_pass_leaves_the_rank_to_the_usual_pass(tmp_path, monkeypatch):
    # the early pass is an optimisation made with a guessed taxonomy: whatever fails in it, the
    # rank is enriched by the usual pass, and the store is the one built without it
    from asaptrace.enrich import streaming

    monkeypatch.setattr(streaming, "GROUP_EVENTS", 1)
    src = SAMPLES / "coupled" / "kineto"
    monkeypatch.setattr(streaming.EarlyPass, "add", lambda self, *a: None)
    usual = build_store([src], tmp_path / "usual", jobs=2)
    monkeypatch.undo()
    monkeypatch.setattr(streaming, "GROUP_EVENTS", 1)

    def broken(*a):
        raise RuntimeError("a bug in the early pass")

    monkeypatch.setattr(streaming.EarlyPass, "_first_pass", staticmethod(broken))
    used = _spy_early(monkeypatch)
    other = build_store([src], tmp_path / "other", jobs=2)
    assert used == [0]
    _same_store(usual, other)


def test_a_rank_cut_by_its_own_gaps_otherwise_than_by_the_run_is_cut_again(tmp_path, monkeypatch):
    # ranks without step annotations are cut into steps by idle gaps longer than a run-wide
    # threshold (20 x the median gap of every such rank). The early pass cuts each rank by its
    # own gaps; where the run-wide plan cuts them otherwise the rank is done again. Rank 0: gaps
    # of 100 us and one of 3 ms (its own threshold 2 ms: cut in two); rank 1: gaps of 200 us and
    # one of 10 ms. Run-wide the median gap is 200 us, the threshold 4 ms: rank 0 has no boundary
    # and rank 1 one, so the ranks disagree and nothing is cut - the store the usual pass builds.
    from asaptrace.enrich import streaming
    from tests._kineto_helpers import gpu_process, kernel, write_trace

    monkeypatch.setattr(streaming, "GROUP_EVENTS", 1)

    def kernels(gaps_us: list[float]) -> list[dict]:
        out, t = [], 10.0
        for i, gap in enumerate([0.0, *gaps_us]):
            t += gap
            out.append(kernel(f"gemm_kernel_{i % 3}", t, 10, corr=i + 1))
            t += 10
        return out

    src = tmp_path / "in"
    write_trace(src / "rank0.json", gpu_process() + kernels([100] * 4 + [3000] + [100] * 4), rank=0)
    write_trace(src / "rank1.json", gpu_process() + kernels([200] * 14 + [10_000] + [200] * 14), rank=1)
    used = _spy_early(monkeypatch)
    early = build_store([src], tmp_path / "early", jobs=1)
    assert used == [2]  # both ranks were cut early, by their own gaps
    steps = early.read("events").filter(pl.col("is_device")).get_column("step").unique().to_list()
    assert steps == [0] and early.meta["segmentation"]["step_source"] == "single"
    monkeypatch.setattr(streaming.EarlyPass, "add", lambda self, *a: None)
    _same_store(early, build_store([src], tmp_path / "usual", jobs=1))
