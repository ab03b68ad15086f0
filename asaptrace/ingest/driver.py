"""Multi-file ingest: discover sources, read them in parallel, resolve ranks, write one store.

Each file is read by its format's pure per-file function inside a worker process; the worker
writes that file's table parts straight into the store's temporary directory (so memory stays
bounded by one file per worker and no large table is pickled back), and returns a small summary.
The driver then checks ranks (no duplicates), writes ranks/streams/meta, and commits atomically;
on any error the temporary directory is removed and no store is left behind.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from asaptrace import memory
from asaptrace.accounting import Accounting
from asaptrace.chunks import CHUNK_DIR, HostChunks
from asaptrace.errors import CorruptTrace, RankError, SizeLimitExceeded, UnsupportedFormat, UsageError
from asaptrace.executors import (
    Executor,
    ThreadExecutor,
    available_memory,
    default_threads,
    make_executor,
)
from asaptrace.ingest.base import (
    FORMATS,
    IngestOptions,
    RankInfo,
    detect_format,
)
from asaptrace.ingest.discovery import SourceFacts, find_sources, run_refusal, run_warnings
from asaptrace.ingest.kineto import prefetch
from asaptrace.ingest.ranks import RankFrom, check_unique_ranks, explicit_ranks, resolve_rank
from asaptrace.ingest.source import GZIP_RATIO, file_sha256, is_gzip
from asaptrace.schema import RANKS_SCHEMA, STREAMS_SCHEMA, Role, conform
from asaptrace.store import StoreWriter, TraceStore, check_store_target, write_part
from asaptrace.userfiles import StaleFolder

#: ``after_read(root, rank, events, args)``: told each file's raw tables (rank filled in, as they
#: are stored) on the thread that read it, before the next file is taken; ``root`` is the store's
#: temporary directory (scratch files may go under it: it is removed with the store on an error).
AfterRead = Callable[[Path, int, pa.Table, pa.Table], None]


@dataclass(frozen=True)
class FileTask:
    index: int
    path: str
    format: str | None  # None: detect
    root: str  # the store's temporary directory
    options: IngestOptions
    rank_from: RankFrom
    explicit_rank: int | None
    single_file: bool = False  # the only source: no rank anywhere means rank 0 ("single-file")
    memory_bytes: int = 0  # what reading it holds at its peak (the thread executor's memory bound)
    hold: bool = False  # hand the tables back (kept in memory for the enrichment) instead of writing them
    scratch: bool = False  # write the parts as scratch parts (the enrichment reads and replaces them)
    after_read: AfterRead | None = None  # in-process executors only (a callable is not sent to workers)
    skip_bad: bool = False  # a file that cannot be read comes back as :class:`Unreadable` instead of failing


#: What a file that cannot be read raises (a rank that cannot be told is not among them: the file
#: is readable, and --rank-map says which rank it is).
BAD_FILE = (CorruptTrace, UnsupportedFormat, SizeLimitExceeded)


@dataclass(frozen=True)
class Unreadable:
    """A file ``--skip-bad`` left out, and the one-line reason."""

    index: int
    path: str
    reason: str


@dataclass
class FileSummary:
    """What a worker sends back for one source file (small: no event tables)."""

    index: int
    path: str
    format: str
    size: int
    sha256: str
    rank_info: RankInfo
    accounting: Accounting
    events: int
    streams: pa.Table
    notes: dict[str, Any] = field(default_factory=dict)
    start_ns: int | None = None  # the file's time range (before clock alignment)
    end_ns: int | None = None
    tables: dict[str, pa.Table] | None = None  # the parts, when the task held them (``FileTask.hold``)
    host_chunks: HostChunks | None = None  # its plain host rows and flows, written in chunks by its reader


@dataclass(frozen=True)
class Progress:
    """Sent to the progress callback after each file."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    events_done: int
    last: FileSummary | Unreadable


def _sha256_in_thread(path: Path) -> tuple[threading.Thread, dict[str, str]]:
    """Hash the file on a second thread (hashlib releases the GIL), overlapping the parse."""
    out: dict[str, str] = {}

    def run() -> None:
        out["sha256"] = file_sha256(path)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def ingest_file(task: FileTask) -> FileSummary | Unreadable:
    """Worker body: read one file, fill its rank, write its parts under the temporary root (with
    ``task.skip_bad``, a file that cannot be read comes back as :class:`Unreadable`, nothing written)."""
    path = Path(task.path)
    known = prefetch.digest(path)  # read ahead while the process was importing
    hasher, digest = None, {} if known is None else {"sha256": known}
    try:
        fmt = FORMATS.get(task.format) if task.format else detect_format(path)
        if known is None and not (fmt.hashes_while_reading and fmt.hashes_while_reading(path, task.options)):
            hasher, digest = _sha256_in_thread(path)  # else the reader hashes it (result.sha256)
        result = fmt.read(path, task.options)
        hint = fmt.rank_hint(path)  # a file whose rank cannot be told is skipped with the bad ones
        info = resolve_rank(
            result.rank_info, path, task.rank_from, task.explicit_rank, hint, single_file=task.single_file
        )
    except (*BAD_FILE, RankError) as e:
        if not task.skip_bad:
            raise
        prefetch.take(path)
        if hasher is not None:
            hasher.join()
        return Unreadable(task.index, str(path), e.message)
    prefetch.take(path)  # let go of what was read ahead for it, if its reader did not take it
    assert info.rank is not None
    result = result.with_rank(info.rank)
    root = Path(task.root)
    part = f"{task.index:05d}"
    held: dict[str, pa.Table] = {}
    stored = {name: conform(getattr(result, name), name) for name in ("events", "args", "flows")}
    if task.after_read is not None and result.host_chunks is None:  # a rank in chunks: enriched alone
        task.after_read(root, info.rank, stored["events"], stored["args"])
    for name, table in stored.items():
        if table.num_rows:
            if task.hold:
                held[name] = table
            else:
                write_part(root, name, part, table, scratch=task.scratch)
    if hasher is not None:
        hasher.join()
    return FileSummary(
        index=task.index,
        path=str(path),
        format=fmt.name,
        size=path.stat().st_size,
        sha256=digest.get("sha256") or result.sha256 or "",
        rank_info=info,
        accounting=result.accounting,
        events=result.events.num_rows + (result.host_chunks.rows if result.host_chunks else 0),
        streams=result.streams,
        notes=result.notes,
        **_time_range(result.events, result.host_chunks),
        tables=held if task.hold else None,
        host_chunks=result.host_chunks,
    )


def _time_range(events: pa.Table, chunks: HostChunks | None) -> dict[str, Any]:
    """The file's time range: its events' and those of its host chunks."""
    starts, ends = [], []
    if chunks is not None and chunks.start_ns is not None and chunks.end_ns is not None:
        starts.append(chunks.start_ns)
        ends.append(chunks.end_ns)
    if events.num_rows:
        ts = events.column("ts_ns")
        starts.append(pc.min(ts).as_py())
        ends.append(pc.max(pc.add(ts, events.column("dur_ns"))).as_py())
    return {"start_ns": min(starts, default=None), "end_ns": max(ends, default=None)}


def ingest_paths(
    paths: Iterable[str | Path],
    out: str | Path,
    *,
    jobs: int | None = 1,
    options: IngestOptions | None = None,
    rank_from: RankFrom = "auto",
    rank_map: dict[str, int] | None = None,
    format: str | None = None,
    overwrite: bool = False,
    progress: Callable[[Progress], None] | None = None,
    finish: Callable[[StoreWriter, dict[str, Any]], dict[str, Any]] | None = None,
    executor: str | Executor | None = None,
    on_stale: Callable[[StaleFolder], None] | None = None,
    after_read: AfterRead | None = None,
    skip_bad: bool = False,
    mix_devices: bool = False,
    memory_budget: int | None = None,
    on_memory: Callable[[MemoryNote], None] | None = None,
    options_said: dict[str, str] | None = None,
) -> TraceStore:
    """Ingest trace files (or folders of them) into a new store at ``out``; returns the opened store.

    ``executor`` maps the per-file task over the files: a name registered in
    :data:`~asaptrace.executors.EXECUTORS` (``serial``, ``thread``, ``process``, ``ray``)
    or an executor object; ``None`` reads one file after the other when ``jobs`` is 1 and on
    ``jobs`` threads of this process otherwise, bounded by memory (``jobs=None``:
    :func:`~asaptrace.executors.default_threads`, one per CPU and at most one per file).
    Every executor builds the same store, byte for byte in its tables. The ``process`` executor
    spawns workers, which needs the calling script to run under ``if __name__ == "__main__":``.

    ``finish(writer, meta) -> meta``, when given, runs on the complete raw store in the writer's
    temporary directory just before the commit (the pipeline enriches there, so the store is
    committed once); an error in it leaves nothing behind, like any other. Its raw parts are
    then not all written: read in this process (serial or threads), the files' tables are held
    in memory (:meth:`~asaptrace.store.StoreWriter.hold_part`), in file order while they fit in
    :func:`hold_budget`, and only the rest is written — ``finish`` reads both.

    ``after_read`` (:data:`AfterRead`), when the files are read in this process, is told each
    file's raw tables as soon as they exist (the pipeline starts enriching a rank there, beside
    the reading of the next files); with another executor it is not called.

    ``memory_budget`` (bytes; default :data:`~asaptrace.memory.DEFAULT_BUDGET`, 1 GiB)
    bounds the files read at once on threads (their estimated peaks together, within half the
    free memory as before). A Kineto rank file whose whole read would not keep the budget is read
    in pieces and, with ``finish``, its plain host rows and flows are written in chunks under the staging
    folder (:mod:`asaptrace.chunks`: the summary's ``host_chunks``, handed to ``finish`` as the
    writer's ``host_chunks``); a file whose own peak still exceeds the budget cannot be kept to it:
    ``on_memory`` is then told why, once (:class:`MemoryNote`), and the ingest goes on.

    ``on_stale`` is told of each temporary folder a killed earlier ingest to ``out`` left behind,
    removed before this one starts (see :class:`~asaptrace.store.StoreWriter`).

    All or nothing by default: one file that cannot be read fails the ingest. ``skip_bad`` keeps
    the readable files and records the others, each with its reason, in ``meta["discovery"]
    ["unreadable"]`` (their events are in no count of the accounting, which says how many files
    it left out). Separate one-rank runs, and device types mixed without ``mix_devices``, are
    refused (:func:`~asaptrace.ingest.discovery.run_refusal`).
    ``meta["ingest"]``: the paths (absolute) and ``options_said``, what rebuilds the store.
    """
    paths = list(paths)
    options = options or IngestOptions()
    check_store_target(out, overwrite=overwrite)  # a bad output fails before any file is opened
    sources = find_sources(paths, skip_bad=skip_bad)  # folders walked, non-traces skipped
    files = sources.files
    if format is not None:
        FORMATS.get(format)  # unknown name → RegistryError
    explicit = explicit_ranks(files, rank_from, rank_map)
    sizes = [f.stat().st_size for f in files]
    if isinstance(executor, str):
        runner: Executor = make_executor(executor, jobs=jobs)  # each applies its own default for None
    elif executor is None:
        jobs = default_threads(len(files)) if jobs is None else max(1, min(jobs, len(files)))
        runner = make_executor("serial" if jobs == 1 else "thread", jobs=jobs)
    else:
        runner = executor
    budget = memory.DEFAULT_BUDGET if memory_budget is None else memory_budget
    memory.tune_malloc(budget)  # freed big buffers go back to the system, heaps keep a top pad
    # a file read whole keeps the budget; a lone file to enrich is read on both cores
    enriched = len(files) if finish is not None else 0
    options = replace(options, piecewise_from=memory.piecewise_limit(budget, enriched_files=enriched))
    # the thread executor's bound: the files read at once share the process's fixed part; a file
    # read in pieces asks for more than all of it (gate + 1), so nothing runs beside it
    gate = max(0, min(budget, (available_memory() or 2**62) // 2) - memory.shared_bytes())
    if isinstance(runner, ThreadExecutor) and runner.memory is None:
        runner.memory = gate
    largest = max(range(len(files)), key=lambda i: _decompressed(files[i], sizes[i], options), default=None)
    if largest is not None and on_memory is not None:
        size = _decompressed(files[largest], sizes[largest], options)
        chunked = finish is not None and _reads_in_chunks(files[largest], format, options)
        if (peak := memory.over_budget(budget, size, chunked=chunked, several=enriched > 1)) is not None:
            on_memory(MemoryNote(files[largest], size, budget, peak, chunked, enriched > 1))
    in_process = getattr(runner, "in_process", False)
    hold = _held(sizes, files, options) if finish is not None and in_process else []
    with StoreWriter(out, overwrite=overwrite, on_stale=on_stale) as writer:
        tasks = [
            FileTask(
                i,
                str(f),
                format,
                str(writer.tmp),
                options
                if finish is None
                else replace(options, chunk_dir=str(writer.tmp / CHUNK_DIR / f"{i:05d}")),
                rank_from,
                explicit[i],
                single_file=len(files) == 1,
                memory_bytes=_memory_bytes(f, sizes[i], options, alone=gate + 1),
                hold=i < len(hold) and hold[i],
                scratch=finish is not None,
                after_read=after_read if in_process else None,
                skip_bad=skip_bad,
            )
            for i, f in enumerate(files)
        ]
        prefetch.stop()  # the files not begun ahead are read by the tasks
        try:
            done = _run(tasks, runner, sizes, progress)
        finally:
            prefetch.clear()
        summaries = sorted((s for s in done if isinstance(s, FileSummary)), key=lambda s: s.index)
        unreadable = sorted(
            sources.unreadable
            + [{"path": u.path, "reason": u.reason} for u in done if isinstance(u, Unreadable)],
            key=lambda u: u["path"],
        )
        if not summaries:
            raise UsageError(f"no file could be read: {_unread_line(unreadable)}")
        facts = _facts(summaries)
        if (refusal := run_refusal(facts, mix_devices=mix_devices)) is not None:
            raise UsageError(refusal)
        for s in summaries:
            for name, table in (s.tables or {}).items():
                writer.hold_part(name, f"{s.index:05d}", table)
            s.tables = None
        check_unique_ranks(summaries)
        writer.host_chunks = {s.rank_info.rank: s.host_chunks for s in summaries if s.host_chunks is not None}
        writer.write_table("ranks", _ranks_table(summaries))
        writer.write_table("streams", pa.concat_tables([s.streams.cast(STREAMS_SCHEMA) for s in summaries]))
        total = Accounting()
        for s in summaries:
            total = total.merge(s.accounting)
        total.check("the store")
        meta = {
            "ingest": {"inputs": [str(Path(p).absolute()) for p in paths], **(options_said or {})},
            "discovery": {**sources.to_json(), "unreadable": unreadable, "warnings": run_warnings(facts)},
            "parallel": None,
            "taxonomy_profile": None,
            "enriched": False,
            "accounting": {
                **total.to_json(),
                "files_read": len(summaries),
                "files_unreadable": len(unreadable),
            },
            "sources": [
                {
                    "path": s.path,
                    "size": s.size,
                    "sha256": s.sha256,
                    "format": s.format,
                    "rank": s.rank_info.rank,
                    "accounting": s.accounting.to_json(),
                    "notes": s.notes,
                }
                for s in summaries
            ],
        }
        if finish is not None:
            memory.give_back()  # the reading's buffers are freed: the enrichment reuses their pages
            meta = finish(writer, meta)
        return writer.commit(meta)


def _decompressed(path: Path, size: int, options: IngestOptions) -> int:
    """The (estimated) decompressed size of ``path``."""
    return int(min(size * GZIP_RATIO, options.max_decompressed_bytes) if is_gzip(path) else size)


def _memory_bytes(path: Path, size: int, options: IngestOptions, *, alone: int) -> int:
    """What reading ``path`` adds to the peak beside the files read with it, for the thread
    executor's memory bound (:func:`~asaptrace.memory.read_share`); ``alone`` (the whole bound)
    for a file over the size read in pieces, which runs by itself: its pieces keep both cores busy,
    and its whole read would not keep the budget beside another file's."""
    inflated = _decompressed(path, size, options)
    return alone if inflated > options.piecewise_from else memory.read_share(inflated)


def _reads_in_chunks(path: Path, format: str | None, options: IngestOptions) -> bool:
    """Whether ``path``'s reader writes its plain host rows and flows in chunks (an ingest that enriches)."""
    try:
        fmt = FORMATS.get(format) if format else detect_format(path)
    except (UnsupportedFormat, CorruptTrace, SizeLimitExceeded):
        return False
    return fmt.reads_in_chunks is not None and fmt.reads_in_chunks(path, options)


@dataclass(frozen=True)
class MemoryNote:
    """The memory budget cannot be kept: ``path`` (``size`` bytes decompressed) is one rank, about
    ``peak`` bytes at its peak: segmented whole, or (``chunked``) read in chunks but its device
    work and annotations held whole; (``several``) written beside the other ranks' final tables."""

    path: Path
    size: int
    budget: int
    peak: int
    chunked: bool = False
    several: bool = False


#: A file's canonical tables take about this share of its decompressed size (Kineto: 0.3–0.4).
TABLES_PER_BYTE = 0.5


#: Bytes an ingest keeps in memory to save work (see :func:`hold_budget`).
HOLD_BYTES = int(os.environ.get("ASAPTRACE_HOLD_MB", "8")) * 1024**2


def hold_budget() -> int:
    """Bytes of raw tables an ingest holds in memory for its enrichment instead of writing them as
    scratch parts (and, again, of enriched frames it keeps for the writing pass instead of
    spilling them): :data:`HOLD_BYTES` (8 MiB; ``ASAPTRACE_HOLD_MB`` sets it), at most a quarter
    of the memory available.

    Small on purpose: the streaming enrichment's peak is about one group of ranks, and a budget
    that grew with the run would bring back the whole-run-in-memory peak it exists to avoid. The
    default keeps ``benchmarks/ingest_memory.py``'s bar (peak ≤ 0.5× the whole-run path: 0.46×);
    beyond the budget, parts and frames go to Arrow IPC files, so a larger one buys little (8
    files of 40 MB: 2.01 s at 8 MiB, 1.94 s at 64, 1.86 s unbounded; docs/executors.md)."""
    return min((available_memory() or 0) // 4, HOLD_BYTES)


def _held(sizes: list[int], files: list[Path], options: IngestOptions) -> list[bool]:
    """Which files' tables are held (the first ones, while their estimated size fits the budget)."""
    left = hold_budget()
    out: list[bool] = []
    for f, size in zip(files, sizes, strict=True):
        need = _decompressed(f, size, options) * TABLES_PER_BYTE
        out.append(need <= left)
        left = left - need if need <= left else 0
    return out


def _run(
    tasks: list[FileTask], executor: Executor, sizes: list[int], progress: Callable[[Progress], None] | None
) -> list[FileSummary | Unreadable]:
    done: list[FileSummary | Unreadable] = []
    state = {"bytes": 0, "events": 0}
    for s in executor.map(ingest_file, tasks):
        done.append(s)
        state["bytes"] += sizes[s.index]
        state["events"] += s.accounting.read if isinstance(s, FileSummary) else 0
        if progress:
            progress(Progress(len(done), len(tasks), state["bytes"], sum(sizes), state["events"], s))
    return done


def _facts(summaries: list[FileSummary]) -> list[SourceFacts]:
    return [
        SourceFacts(
            s.path,
            s.sha256,
            s.start_ns,
            s.end_ns,
            s.rank_info.world_size,
            s.notes.get("device_model"),
            s.rank_info.rank,
            s.rank_info.source,
        )
        for s in summaries
    ]


def _unread_line(unreadable: list[dict[str, str]]) -> str:
    return "; ".join(f"{Path(u['path']).name} ({u['reason']})" for u in unreadable)


def _ranks_table(summaries: list[FileSummary]) -> pa.Table:
    rows = [
        {
            "rank": s.rank_info.rank,
            "role": Role.UNKNOWN.value,
            "dp_group": s.rank_info.dp,
            "tp_index": s.rank_info.tp,
            "pp_index": s.rank_info.pp,
            "ep_index": s.rank_info.ep,
            "world_size": s.rank_info.world_size,
            "host": s.rank_info.host,
            "device": s.rank_info.device,
            "clock_offset_ns": 0,
            "clock_residual_ns": None,
            "source_file": s.path,
            "format": s.format,
            "rank_source": s.rank_info.source,
            "events": s.events,
        }
        for s in summaries
    ]
    return pa.Table.from_pylist(rows, schema=RANKS_SCHEMA).sort_by("rank")
