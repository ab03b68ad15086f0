"""The ``asaptrace`` command: parse options → one library call → format (a rich table or --json).

Every command catches user errors at the edge (:func:`user_errors`): one line on stderr, exit 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from asaptrace import __version__
from asaptrace._cli_common import err, human_bytes, human_ns, out, parse_size, print_json, user_errors
from asaptrace.analyze.store_info import store_info
from asaptrace.ingest import IngestOptions
from asaptrace.ingest.driver import Progress as IngestProgress
from asaptrace.ingest.driver import ingest_paths, load_rank_map
from asaptrace.ingest.source import DEFAULT_MAX_DECOMPRESSED
from asaptrace.store import TraceStore

app = typer.Typer(
    name="asaptrace",
    help="Where MoE prefill time goes, who waits on whom, and what an asynchronous disaggregated design wins back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

StoreArg = Annotated[Path, typer.Argument(help="A store directory written by `asaptrace ingest`.")]
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print a machine-readable JSON object instead of tables.")
]


def _version(value: bool) -> None:
    if value:
        out.print(f"asaptrace {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """asaptrace: diagnose MoE prefill traces."""


# --------------------------------------------------------------------------------------------- ingest
@app.command()
@user_errors
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Trace files or folders of them (one file per rank).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Store directory to create.")],
    jobs: Annotated[
        int, typer.Option("--jobs", "-j", help="Files read in parallel (default: CPU count).")
    ] = 0,
    rank_from: Annotated[
        str, typer.Option(help="Where ranks come from: auto (file content, then name), content, name, order.")
    ] = "auto",
    rank_map: Annotated[
        Path | None, typer.Option(help="File of '<trace file> <rank>' lines saying which file is which rank.")
    ] = None,
    max_size: Annotated[
        str, typer.Option(help="Refuse a file that is (or decompresses to) more than this, e.g. 512M, 8G.")
    ] = f"{DEFAULT_MAX_DECOMPRESSED // 1024**3}G",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing store at OUTPUT.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Read profiler traces into a store that every analysis reads.

    Example: asaptrace ingest traces/ -o run.store
    """
    if rank_from not in ("auto", "content", "name", "order"):
        raise typer.BadParameter("must be one of auto, content, name, order", param_hint="--rank-from")
    options = IngestOptions(max_decompressed_bytes=parse_size(max_size))
    mapping = load_rank_map(rank_map) if rank_map else None
    with _IngestBar(enabled=not as_json) as bar:
        store = ingest_paths(
            paths,
            output,
            jobs=jobs or None,
            options=options,
            rank_from=rank_from,  # type: ignore[arg-type]
            rank_map=mapping,
            overwrite=force,
            progress=bar.update,
        )
    info = store_info(store)
    if as_json:
        print_json(info)
    else:
        acc = info["accounting"]
        out.print(
            f"wrote [bold]{store.path}[/]: {info['n_ranks']} ranks, {acc['kept']:,} of {acc['read']:,} events kept"
            + (f", {sum(acc['rejected'].values()):,} rejected" if acc["rejected"] else "")
        )


class _IngestBar:
    """A rich progress bar over files, showing bytes and events/s (on stderr; silent with --json)."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled and err.is_terminal
        self.bar = Progress(
            TextColumn("ingest"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        )
        self.task = None

    def __enter__(self) -> _IngestBar:
        if self.enabled:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.bar.stop()

    def update(self, p: IngestProgress) -> None:
        if not self.enabled:
            return
        if self.task is None:
            self.task = self.bar.add_task("ingest", total=p.files_total, detail="")
        elapsed = self.bar.tasks[0].elapsed or 1e-9
        detail = f"{human_bytes(p.bytes_done)}/{human_bytes(p.bytes_total)}  {p.events_done / elapsed:,.0f} events/s"
        self.bar.update(self.task, completed=p.files_done, detail=detail)


# ----------------------------------------------------------------------------------------------- info
@app.command()
@user_errors
def info(store: StoreArg, as_json: JsonOpt = False) -> None:
    """Show what a store holds: ranks, time span, events and device time by kind, accounting, sources.

    Example: asaptrace info run.store --json
    """
    data = store_info(TraceStore.open(store))
    if as_json:
        print_json(data)
        return
    span = data["time_span"]
    acc = data["accounting"]
    out.print(
        f"[bold]{data['store']}[/]  format v{data['format_version']}  {data['n_ranks']} ranks  "
        f"{data['n_events']:,} events  span {human_ns(span['duration_ns'])}"
    )
    rejected = ", ".join(f"{k}: {v:,}" for k, v in acc["rejected"].items()) or "none"
    out.print(f"accounting: read {acc['read']:,} = kept {acc['kept']:,} + rejected ({rejected})")
    kinds = Table("kind", "events", "device time", title="by kind", title_justify="left")
    for kind, n in data["events_by_kind"].items():
        kinds.add_row(kind, f"{n:,}", human_ns(data["device_time_by_kind_ns"].get(kind)))
    out.print(kinds)
    ranks = Table(
        "rank", "role", "dp", "format", "events", "rank from", "source", title="ranks", title_justify="left"
    )
    for r in data["ranks"]:
        ranks.add_row(
            str(r["rank"]),
            r["role"],
            "-" if r["dp_group"] is None else str(r["dp_group"]),
            r["format"],
            f"{r['events']:,}",
            r["rank_source"],
            Path(r["source_file"]).name,
        )
    out.print(ranks)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
