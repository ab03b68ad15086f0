"""``asaptrace ingest``: trace files → an enriched store (:func:`asaptrace.pipeline.build_store`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Self

import typer
from rich.markup import escape

from asaptrace.cli._common import (
    BatchesOpt,
    JsonOpt,
    ParallelOpt,
    PhaseBar,
    TaxonomyOpt,
    err,
    out,
    parse_size,
    print_json,
    print_message,
    print_wrapped,
    user_errors,
)
from asaptrace.pipeline import DEFAULT_BUDGET, DEFAULT_MAX_DECOMPRESSED  # a cheap import: every layer waits
from asaptrace.units import human_bytes

if TYPE_CHECKING:
    from asaptrace.ingest.driver import MemoryNote
    from asaptrace.ingest.driver import Progress as IngestProgress
    from asaptrace.userfiles import StaleFolder


@user_errors
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Trace files or folders of them (one file per rank).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Store directory to create.")],
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Files read at once (default: one per CPU, at most one per file, within half the free memory).",
        ),
    ] = None,
    executor: Annotated[
        str | None,
        typer.Option(
            help="Where files are read: serial, thread, process (a local pool) or ray "
            "(`pip install 'asaptrace\\[ray]'`); default: threads (serial for --jobs 1 or one file)."
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster to run on (auto, HOST:6379, ray://HOST:10001); default: a local instance."
        ),
    ] = None,
    rank_from: Annotated[
        str, typer.Option(help="Where ranks come from: auto (file content, then name), content, name, order.")
    ] = "auto",
    rank_map: Annotated[
        Path | None, typer.Option(help="File of '<trace file> <rank>' lines saying which file is which rank.")
    ] = None,
    max_size: Annotated[
        str, typer.Option(help="Refuse a file that is (or decompresses to) more than this, e.g. 512M, 8G.")
    ] = f"{DEFAULT_MAX_DECOMPRESSED // 1024**3}G",
    memory_budget: Annotated[
        str,
        typer.Option(
            help="Memory the files read at once may take together, e.g. 512M, 4G (a Kineto rank "
            "file too large to read whole within it, or a lone one over 128M, is read in pieces, its "
            "host events and flows kept on disk in chunks; a budget that still cannot be kept, the "
            "ingest says)."
        ),
    ] = f"{DEFAULT_BUDGET // 1024**3}G",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing store at OUTPUT.")] = False,
    skip_bad: Annotated[
        bool,
        typer.Option(
            "--skip-bad",
            help="Keep the files that can be read and list the others with their reasons "
            "(default: one unreadable file fails the ingest, nothing written).",
        ),
    ] = False,
    mix_devices: Annotated[
        bool,
        typer.Option(
            "--mix-devices",
            help="Allow files profiled on different device types (deviceProperties) in one store.",
        ),
    ] = False,
    parallel: ParallelOpt = None,
    batches: BatchesOpt = None,
    taxonomy: TaxonomyOpt = None,
    no_enrich: Annotated[
        bool,
        typer.Option(
            "--no-enrich", help="Store the raw events only (no kinds, steps, layers, clock alignment)."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Read profiler traces into a store that every analysis reads.

    Example: asaptrace ingest traces/ -o run.store
    """
    from asaptrace import pipeline

    max_bytes = parse_size(max_size)
    budget = parse_size(memory_budget)
    if executor in (None, "serial", "thread"):  # read in this process: the first files, while the imports run
        pipeline.read_ahead(paths, max_bytes=max_bytes, budget=budget, enrich=not no_enrich)
    from asaptrace.views.store import discovery_lines, ingest_summary

    if rank_from not in ("auto", "content", "name", "order"):
        raise typer.BadParameter("must be one of auto, content, name, order", param_hint="--rank-from")
    if ray_address is not None and executor != "ray":
        raise typer.BadParameter("needs --executor ray", param_hint="--ray-address")
    t0 = time.perf_counter()
    with _IngestBar(enabled=not as_json) as bar:
        store = pipeline.build_store(
            paths,
            output,
            overwrite=force,
            enrich=not no_enrich,
            parallel=parallel,
            taxonomy=taxonomy,
            batches=batches,
            jobs=jobs,
            max_bytes=max_bytes,
            rank_from=rank_from,
            rank_map=rank_map,
            progress=bar.update,
            enrich_progress=bar.enrich,
            executor=executor,
            ray_address=ray_address,
            on_stale=_said_stale,
            memory_budget=budget,
            on_memory=_said_memory,
            skip_bad=skip_bad,
            mix_devices=mix_devices,
        )
    info = pipeline.store_info(store)
    if as_json:
        print_json(info)
        return
    for line in discovery_lines(info):  # wrapped on a terminal, one whole line each in a log
        print_message(err, "", line)
    # the path on its own line (folded if it is wider than the terminal), then what was kept
    out.print(f"wrote [bold]{escape(str(store.path))}[/]:", overflow="fold")
    print_wrapped(out, "  ", ingest_summary(info, time.perf_counter() - t0))


def _said_stale(folder: StaleFolder) -> None:
    print_message(
        err,
        "",
        f"removed {folder.path} ({human_bytes(folder.size)}), left by an ingest (pid {folder.pid}) that no longer runs",
    )


def _said_memory(note: MemoryNote) -> None:
    print_message(
        err,
        "",
        f"memory budget {human_bytes(note.budget)} cannot be kept: {note.path.name} "
        f"({human_bytes(note.size)}) is one rank, "
        + ("read in chunks but its device work held whole" if note.chunked else "segmented whole")
        + (" and written beside the other ranks" if note.several else "")
        + f", about {human_bytes(note.peak)} at its peak",
    )


class _IngestBar(PhaseBar):
    """Rich progress on stderr (silent with --json or when stderr is not a terminal): a bar over
    files (bytes, events/s), then one over the enrichment's ranks naming its phase, so the wait
    after the last file is read is visibly work (segmenting, aligning clocks, writing)."""

    def __init__(self, *, enabled: bool) -> None:
        super().__init__("ingest", enabled=enabled)
        self.t0 = time.perf_counter()

    def __enter__(self) -> Self:
        self.t0 = time.perf_counter()
        return super().__enter__()

    def update(self, p: IngestProgress) -> None:
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        detail = f"{human_bytes(p.bytes_done)}/{human_bytes(p.bytes_total)}  {p.events_done / elapsed:,.0f} events/s"
        self.advance("read", p.files_done, p.files_total, detail)

    def enrich(self, phase: str, done: int, total: int) -> None:
        self.advance("enrich", done, total, f"{phase} (ranks)")
