"""Memory of a big ingest: freed buffers go back to the system, heaps keep room at their top so a
loop of allocations does not fault in fresh pages each time, and the writing pass copies no whole
rank it does not have to (issue 28)."""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import polars as pl
import pytest

from asaptrace.enrich.clock import apply_offsets
from asaptrace.enrich.frames import finish_ranks
from asaptrace.errors import UsageError
from asaptrace.ingest.source import HASH_BLOCK, file_sha256
from asaptrace.memory import shared_bytes
from asaptrace.pipeline import build_store

ROOT = Path(__file__).resolve().parents[1]

# Frees a 16 MiB block (glibc then raises its mmap threshold to 16 MiB), allocates 200 blocks of
# 1 MiB, frees every other one and prints the MiB of RSS given back.
_FRAGMENT = r"""
import sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
if sys.argv[1] == "fixed":
    from asaptrace.memory import tune_malloc
    assert tune_malloc()
big = bytearray(16 * 2**20)
del big
blocks = [bytearray(2**20) for _ in range(200)]
before = rss()
del blocks[::2]
print(before - rss())
"""


def _given_back(mode: str, **env: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENT, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in {**os.environ, **env}.items() if k != "MALLOC_MMAP_THRESHOLD_"},
        check=True,
    )
    return float(out.stdout.strip())


def _glibc() -> bool:
    return sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None


def test_file_hash_read_in_blocks_is_the_files_sha256(tmp_path):
    """file_sha256 reads into one 1 MiB buffer: a file of several blocks and a partial last one,
    a file of exactly one block and an empty file hash as hashlib hashes their bytes whole."""
    rng = random.Random(7)
    for size in (0, HASH_BLOCK, 2 * HASH_BLOCK + 12_345):
        path = tmp_path / f"f{size}.json"
        data = rng.randbytes(size)
        path.write_bytes(data)
        assert file_sha256(path) == hashlib.sha256(data).hexdigest(), size


_OPENBLAS = r"""
import os, sys
sys.argv = ["asaptrace", "--version"]
from asaptrace.cli import main
try:
    main()
except SystemExit:
    pass
print(os.environ.get("OPENBLAS_NUM_THREADS"), file=sys.stderr)
"""


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("3", "3")])
def test_console_script_keeps_openblas_to_one_thread_unless_told(given, expected):
    """Consistency check of the console script's environment: numpy's OpenBLAS gets one thread
    (no spinning pool beside the read-ahead), a value the user set is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    out = subprocess.run([sys.executable, "-c", _OPENBLAS], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.stderr.strip().splitlines()[-1] == expected


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")
def test_fixed_mmap_threshold_gives_freed_blocks_back():
    # 100 of the 200 MiB blocks are freed. With glibc's threshold raised by the 16 MiB block, the
    # 1 MiB blocks live in the heap and the holes stay resident (≈ 0 given back); with the
    # threshold kept at 128 KiB each block is a mapping of its own and ≈ 100 MiB go back.
    assert _given_back("default") < 20
    assert _given_back("fixed") > 90


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")
def test_user_threshold_is_left_alone():
    code = "from asaptrace.memory import tune_malloc; print(tune_malloc())"
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert out.stdout.strip() == "False"


# Allocates and frees 16 MiB of 64 KiB blocks (served from the heap: under the mmap threshold)
# twice, and prints the page faults of the second round.
_REFAULT = r"""
import resource, sys
if sys.argv[1] == "tuned":
    from asaptrace.memory import tune_malloc
    tune_malloc()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(2):
    before = faults()
    blocks = [bytearray(64 * 1024) for _ in range(256)]
    del blocks
print(faults() - before)
"""


def _refaults(mode: str, **env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _REFAULT, mode],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**clean, **env},
        check=True,
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")
def test_top_pad_keeps_freed_heap_pages_for_the_next_round():
    # 16 MiB is 4,096 pages. glibc by default gives the heap's free top back once it passes
    # 128 KiB, so the second round faults most of its pages in again; with the top pad (32 MiB at
    # the default budget) the heap keeps them and the second round takes none from the kernel.
    assert _refaults("default") > 1000
    assert _refaults("tuned") < 100
    # a pad the user set in the environment is left alone (0: glibc's own behaviour)
    assert _refaults("tuned", MALLOC_TOP_PAD_="0") > 1000


def _events(rank: list[int], eid: list[int], ts: list[int | None]) -> pl.DataFrame:
    return pl.DataFrame(
        {"rank": rank, "eid": eid, "ts_ns": ts, "name": [f"e{e}" for e in eid], "context": [0] * len(eid)},
        schema={"rank": pl.Int32, "eid": pl.Int64, "ts_ns": pl.Int64, "name": pl.String, "context": pl.Int8},
    )


OFFSETS = pl.DataFrame(
    {"rank": [0, 1], "offset_ns": [100, -50]}, schema={"rank": pl.Int32, "offset_ns": pl.Int64}
)


def test_apply_offsets_shifts_each_rank_by_its_own_offset():
    ev = _events([1, 0, 2, 1], [0, 0, 0, 1], [1000, 1000, 1000, None])
    out = apply_offsets(ev, OFFSETS)  # sign −1: ts − offset
    # rank 1: 1000 − (−50) = 1050, its null time stays null; rank 0: 1000 − 100 = 900;
    # rank 2 has no offset: unchanged. Rows keep their order, other columns as they were.
    assert out.get_column("ts_ns").to_list() == [1050, 900, 1000, None]
    assert out.select("rank", "eid", "name").equals(ev.select("rank", "eid", "name"))
    back = apply_offsets(out, OFFSETS, sign=+1)
    assert back.get_column("ts_ns").to_list() == [1000, 1000, 1000, None]


def test_finish_ranks_sorts_only_rows_out_of_order():
    none = pl.DataFrame(schema={"rank": pl.Int32})
    # eid 5 before eid 2 within rank 0: out of order, sorted by (rank, eid)
    out, _ = finish_ranks(_events([0, 0, 1], [5, 2, 0], [1, 2, 3]), none, none, OFFSETS)
    assert out.select("rank", "eid").rows() == [(0, 2), (0, 5), (1, 0)]
    assert "context" not in out.columns
    # rank 1 before rank 0: sorted too
    out, _ = finish_ranks(_events([1, 0], [0, 7], [1, 2]), none, none, OFFSETS)
    assert out.select("rank", "eid").rows() == [(0, 7), (1, 0)]
    # in order already: the same rows, shifted
    out, _ = finish_ranks(_events([0, 0, 1], [2, 5, 0], [1000, 2000, 3000]), none, none, OFFSETS)
    assert out.select("rank", "eid", "ts_ns").rows() == [(0, 2, 900), (0, 5, 1900), (1, 0, 3050)]


SAMPLE = ROOT / "sample_traces" / "coupled" / "kineto"


def test_memory_budget_note_names_the_largest_file(tmp_path):
    from asaptrace.ingest.driver import ingest_paths
    from asaptrace.ingest.source import GZIP_RATIO
    from asaptrace.memory import whole_file_peak

    files = sorted(SAMPLE.glob("*.json.gz"))[:3]
    notes = []
    ingest_paths(files, tmp_path / "a.store", jobs=2, memory_budget=2**20, on_memory=notes.append)
    # 1 MiB is less than the imports alone: one note, for the largest file, its peak estimated from
    # its decompressed size (gzip: GZIP_RATIO × the size on disk)
    largest = max(files, key=lambda f: f.stat().st_size)
    assert [n.path for n in notes] == [largest]
    assert notes[0].size == largest.stat().st_size * GZIP_RATIO
    assert notes[0].peak == whole_file_peak(notes[0].size) > notes[0].budget == 2**20
    notes.clear()
    ingest_paths(files, tmp_path / "b.store", jobs=2, memory_budget=2**40, on_memory=notes.append)
    assert notes == []


def test_memory_budget_note_counts_the_writing_pass_of_several_ranks(tmp_path):
    """A folder enriched into one store peaks after its last file, in the writing pass, not while a
    file is read: 8 files of 40 MB peaked at 395–401 MiB under a 300 MiB budget with no word said,
    where one file read whole was estimated at 206 MiB. The estimate for one of several files
    (asaptrace.memory.SEVERAL_FILES_PER_BYTE) now says so; one file alone, or a raw ingest, does
    not write beside other ranks."""
    from asaptrace.ingest.source import GZIP_RATIO
    from asaptrace.memory import whole_file_peak
    from asaptrace.pipeline import build_store

    files = sorted(SAMPLE.glob("*.json.gz"))[:3]
    largest = max(files, key=lambda f: f.stat().st_size)
    size = largest.stat().st_size * GZIP_RATIO
    alone, several = whole_file_peak(size), whole_file_peak(size, several=True)
    assert several > alone
    budget = (alone + several) // 2  # kept by one file's read, not by the writing pass of three ranks
    notes = []
    build_store(files, tmp_path / "a.store", jobs=1, memory_budget=budget, on_memory=notes.append)
    assert [(n.path, n.peak, n.several) for n in notes] == [(largest, several, True)]
    notes.clear()
    build_store([largest], tmp_path / "b.store", memory_budget=budget, on_memory=notes.append)
    assert notes == []


def test_memory_budget_bounds_the_reading_threads(tmp_path, monkeypatch):
    from asaptrace import executors
    from asaptrace.ingest import driver

    seen = []
    real = executors.ThreadExecutor.map

    def spy(self, fn, items):
        seen.append(self.memory)
        return real(self, fn, items)

    monkeypatch.setattr(executors.ThreadExecutor, "map", spy)
    files = sorted(SAMPLE.glob("*.json.gz"))[:2]
    driver.ingest_paths(files, tmp_path / "s.store", jobs=2, memory_budget=300 * 2**20)
    # the files read at once share the process's fixed part (imports, the enrichment's pools)
    assert seen == [300 * 2**20 - shared_bytes()]


def _sparse_kineto(path: Path, mib: int) -> Path:
    """A file of ``mib`` MiB that sniffs as Kineto JSON and takes no disk (its tail is a hole)."""
    with open(path, "wb") as f:
        f.write(b'{"traceEvents": [')
        f.truncate(mib * 2**20)
    return path


def test_mid_size_rank_files_are_read_two_at_once_within_the_budget(tmp_path, monkeypatch):
    """At the default 1 GiB, two rank files of 150 MiB read whole keep the budget side by side
    (280 MiB for the process + 1.65 × 150 MiB each = 775 MiB, asaptrace.memory); the old gate of
    6.5× a file read any file over 79 MiB alone, on one core (4 × 200 MB: 7.55 s, then 6.47 s two
    at once). A file read in pieces (over 243 MiB, one of several to enrich) runs alone: its
    pieces keep both cores busy, and its whole read would not keep the budget beside another."""
    from asaptrace.ingest import driver
    from asaptrace.ingest.driver import Unreadable

    lock = threading.Lock()
    running: list[str] = []
    beside: dict[str, set[str]] = {}

    def hold(task):  # what ran beside each file, instead of reading it
        name = Path(task.path).name
        with lock:
            running.append(name)
            for other in running:
                beside.setdefault(other, set()).update(set(running) - {other})
        time.sleep(0.1)
        with lock:
            running.remove(name)
        return Unreadable(task.index, task.path, "not read")

    monkeypatch.setattr(driver, "ingest_file", hold)
    mid = tmp_path / "mid"
    mid.mkdir()
    for i in range(4):
        _sparse_kineto(mid / f"rank{i}.json", 150)
    with pytest.raises(UsageError, match="no file could be read"):
        build_store([mid], tmp_path / "a.store", jobs=2, skip_bad=True)
    assert all(len(beside[f"rank{i}.json"]) >= 1 for i in range(4))  # each read beside another

    beside.clear()
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    _sparse_kineto(mixed / "rank0.json", 300)
    for i in range(1, 4):
        _sparse_kineto(mixed / f"rank{i}.json", 20)
    with pytest.raises(UsageError, match="no file could be read"):
        build_store([mixed], tmp_path / "b.store", jobs=2, skip_bad=True)
    assert beside.get("rank0.json", set()) == set()  # in pieces: alone
    assert "rank2.json" in beside["rank1.json"]  # the small ones, two at once


def test_rank_facts_hold_only_what_the_decision_reads(tmp_path):
    """The facts every rank keeps until the run-wide decision are what bounds the memory of a
    many-rank ingest: collective kernels keep their names as categoricals (a string per kernel
    of 32 ranks × 10 steps was 30 MB) and the step spans' args only (rank, eid, extra) where
    extra is set (the dp groups and batches read nothing else)."""
    from asaptrace.enrich.frames import facts_of, fill_ranks, segment_ranks, taxonomy_for
    from asaptrace.pipeline import build_store

    store = build_store([SAMPLE], tmp_path / "raw.store", enrich=False, jobs=1)
    ev, args, ranks = store.read("events"), store.read("args"), store.read("ranks")
    ev, args = ev.filter(pl.col("rank") < 2), args.filter(pl.col("rank") < 2)
    tax = taxonomy_for(ev.get_column("name").cast(pl.String).unique().to_list(), None)
    seg = segment_ranks(ev, args, ranks, tax)
    filled, notes = fill_ranks(seg, None)
    facts = facts_of(seg, filled, notes, args)
    assert facts.comm.height > 0 and facts.comm.schema["name"] == pl.Categorical
    assert facts.span_args.columns == ["rank", "eid", "extra"]
    assert facts.span_args.height > 0 and facts.span_args.get_column("extra").null_count() == 0


def test_a_large_file_read_whole_is_its_bytes_in_pages_of_its_own(tmp_path):
    """A plain file of WHOLE_READ_PAGES or more is read into a mapping of its own (huge pages
    where the kernel gives them: fewer page faults); whatever the buffer, its content is the
    file's, byte for byte, and a file that changed since its size was taken is read as it is."""
    import mmap

    from asaptrace.ingest.source import WHOLE_READ_PAGES, read_source_bytes, read_whole

    big = tmp_path / "big.json"
    content = random.Random(3).randbytes(WHOLE_READ_PAGES + 12_345)
    big.write_bytes(content)
    data = read_source_bytes(big)
    assert bytes(data) == content
    if sys.platform.startswith("linux"):
        assert isinstance(data, mmap.mmap)
    small = tmp_path / "small.json"
    small.write_bytes(content[:1000])
    assert read_source_bytes(small) == content[:1000]
    with open(big, "rb", buffering=0) as f:  # it grew after its size was taken
        assert read_whole(f, WHOLE_READ_PAGES) == content
    with open(big, "rb", buffering=0) as f:  # it shrank
        assert read_whole(f, len(content) + 10) == content


def test_a_large_kineto_file_reads_the_same_from_its_own_pages(tmp_path, monkeypatch):
    """The reader takes the mapping as it takes bytes: the tables of a trace over
    WHOLE_READ_PAGES are the same as when it is read into plain bytes (both decoders)."""
    import gzip
    import json

    from asaptrace.ingest import source
    from asaptrace.ingest.kineto import prefetch, read_kineto

    doc = json.loads(gzip.decompress(sorted(SAMPLE.glob("*.json.gz"))[0].read_bytes()))
    doc["traceEvents"] = doc["traceEvents"] * 12  # ≈ 12 MB: over WHOLE_READ_PAGES
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(doc))
    assert path.stat().st_size > source.WHOLE_READ_PAGES
    plain_c = None
    for no_cscan in ("", "1"):
        monkeypatch.setenv("ASAPTRACE_NO_CSCAN", no_cscan)
        paged = read_kineto(path)
        with monkeypatch.context() as m:
            m.setattr(source, "WHOLE_READ_PAGES", 2**62)
            plain = read_kineto(path)
        for name in ("events", "args", "flows", "streams"):
            assert getattr(paged, name).equals(getattr(plain, name)), name
        assert paged.accounting == plain.accounting
        plain_c = plain_c or plain
    # and through the read-ahead, which reads the file while the CLI imports
    monkeypatch.delenv("ASAPTRACE_NO_CSCAN")
    assert prefetch.start([path], max_bytes=2**40) == 1
    try:
        assert prefetch.digest(path) == hashlib.sha256(path.read_bytes()).hexdigest()
        ahead = read_kineto(path)
    finally:
        prefetch.clear()
    assert ahead.events.equals(plain_c.events)
