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
from asaptrace.analyze.diagnosis import Diagnosis, diagnose_store
from asaptrace.analyze.store_info import store_info
from asaptrace.enrich.pipeline import build_store
from asaptrace.ingest import IngestOptions
from asaptrace.ingest.driver import Progress as IngestProgress
from asaptrace.ingest.driver import load_rank_map
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
# options of the enrichment step, shared by `ingest` and `analyze`
ParallelOpt = Annotated[
    str | None,
    typer.Option("--parallel", help="Deployment when the traces do not say it, e.g. dp=8,tp=4,ep=32."),
]
BatchesOpt = Annotated[
    Path | None,
    typer.Option("--batches", help="batches.jsonl sidecar: request lengths per step and DP group."),
]
TaxonomyOpt = Annotated[
    Path | None,
    typer.Option("--taxonomy", help="TOML rule file mapping kernel names to kinds (tried first)."),
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
    if rank_from not in ("auto", "content", "name", "order"):
        raise typer.BadParameter("must be one of auto, content, name, order", param_hint="--rank-from")
    options = IngestOptions(max_decompressed_bytes=parse_size(max_size))
    mapping = load_rank_map(rank_map) if rank_map else None
    with _IngestBar(enabled=not as_json) as bar:
        store = build_store(
            paths,
            output,
            overwrite=force,
            enrich=not no_enrich,
            parallel=parallel,
            taxonomy=taxonomy,
            batches=batches,
            jobs=jobs or None,
            options=options,
            rank_from=rank_from,
            rank_map=mapping,
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
    kept = ", ".join(f"{k} {v:,}" for k, v in acc["kept_by_table"].items())
    out.print(
        f"accounting: read {acc['read']:,} = kept {acc['kept']:,} ({kept}) + rejected ({rejected})",
        soft_wrap=True,
    )
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


# -------------------------------------------------------------------------------------------- analyze
@app.command()
@user_errors
def analyze(
    store: StoreArg,
    as_json: JsonOpt = False,
    csv: Annotated[Path | None, typer.Option("--csv", help="Write every table as DIR/<table>.csv.")] = None,
    parallel: ParallelOpt = None,
    batches: BatchesOpt = None,
    taxonomy: TaxonomyOpt = None,
) -> None:
    """Diagnose a store: who waited on whom, for how long, and why (findings ranked by time at stake).

    Options re-enrich the store in memory (the store on disk is left as it is).

    Example: asaptrace analyze run.store --csv tables/ ; asaptrace analyze run.store --json > diagnosis.json
    """
    diag = diagnose_store(TraceStore.open(store), parallel=parallel, batches=batches, taxonomy=taxonomy)
    if csv is not None:
        csv.mkdir(parents=True, exist_ok=True)
        for name, table in diag.tables.items():
            table.write_csv(csv / f"{name}.csv")
    if as_json:
        print_json(diag.to_json())
        return
    _print_diagnosis(diag)


#: Tables `analyze` prints (the rest are in --json / --csv), with the columns shown.
_SHOWN = {
    "barrier_by_group": ["dp_group", "n_ranks", "mean_wait_ns", "last_share", "imposed_wait_ns"],
    "barrier_by_rank": ["rank", "dp_group", "wait_ns", "exposed_wait_ns", "last_count", "wait_share"],
    "imbalance_by_step": [
        "step",
        "n_groups",
        "tokens_ratio",
        "sum_sq_ratio",
        "attention_ratio",
        "max_sum_sq_group",
    ],
    "overlap_by_role": ["role", "n_ranks", "comm_ns", "exposed_comm_ns", "overlap_efficiency", "utilisation"],
    "stragglers": ["rank", "dp_group", "last_share", "compute_ratio", "moe_ratio", "cause"],
}


def _cell(name: str, value: object) -> str:
    if value is None:
        return "-"
    if name.endswith("_ns"):
        return human_ns(int(value))  # type: ignore[call-overload]
    if isinstance(value, float):
        return (
            f"{100 * value:.1f}%"
            if name.endswith(("_share", "efficiency", "utilisation"))
            else f"{value:.3g}"
        )
    return str(value)


def _print_diagnosis(diag: Diagnosis) -> None:
    out.print(
        f"[bold]{diag.meta.get('store')}[/]  {(diag.meta.get('parallel') or {}).get('deployment', '?')} "
        f"deployment, taxonomy {diag.meta.get('taxonomy_profile')}"
    )
    for i, f in enumerate(diag.findings, 1):
        colour = {"high": "red", "medium": "yellow", "low": "cyan"}.get(f.severity, "dim")
        out.print(f"[bold]{i}.[/] [{colour}]{f.severity}[/] {f.text}")
    for note in diag.notes:
        out.print(f"[dim]note: {note}[/]")
    for name, cols in _SHOWN.items():
        table = diag.tables.get(name)
        if (
            table is None
            or table.height == 0
            or (
                name.startswith("barrier")
                and (
                    diag.tables["barrier_instances"].height == 0
                    or (name == "barrier_by_rank" and diag.tables["barrier_by_group"].height)
                )
            )
        ):
            continue
        if name == "stragglers":
            table = table.filter(table["outlier"] | (table["last_count"] > 0)).sort(
                "last_count", descending=True
            )
        view = Table(*cols, title=name, title_justify="left")
        for row in table.head(12).select(cols).iter_rows(named=True):
            view.add_row(*[_cell(c, row[c]) for c in cols])
        out.print(view)


# ---------------------------------------------------------------------------------------------- synth
@app.command()
@user_errors
def synth(
    preset: Annotated[str | None, typer.Option(help="Built-in preset (see --list-presets).")] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Output directory (replaced if it is an earlier synth run)."),
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Random seed (default: the preset's).")] = None,
    steps: Annotated[int | None, typer.Option(help="Prefill steps to simulate.")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help="kineto, ascend or both.")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="TOML file overriding the preset.")] = None,
    list_presets: Annotated[
        bool, typer.Option("--list-presets", help="List built-in presets and exit.")
    ] = False,
) -> None:
    """Generate synthetic MoE prefill traces (coupled or ASAP-disaggregated) with a truth.json sidecar.

    Example: asaptrace synth --preset coupled -o runs/coupled && asaptrace ingest runs/coupled/kineto -o c.store
    """
    from asaptrace.synth import load_config, presets, synthesize

    if list_presets:
        for name, text in presets().items():
            out.print(f"[bold]{name}[/]  {text}")
        return
    if out_dir is None:
        raise typer.BadParameter("is required (unless --list-presets)", param_hint="-o/--out")
    res = synthesize(load_config(preset, config, seed=seed, steps=steps, fmt=fmt), out_dir)
    out.print(
        f"wrote [bold]{res.out_dir}[/]: {res.world_size} ranks, {res.steps} steps, {res.events:,} events, "
        f"{human_bytes(res.bytes_written)} in {res.seconds:.1f} s"
    )


# --------------------------------------------------------------------------------------------- replay
@app.command()
@user_errors
def replay(
    store: StoreArg,
    policy: Annotated[str, typer.Option(help="coupled, asap, balanced, afd-pingpong or chunked.")] = "asap",
    attention: Annotated[str | None, typer.Option(help="Attention dies as DxT (asap, afd-pingpong).")] = None,
    experts: Annotated[int | None, typer.Option(help="Expert (MoE pool) dies (asap, afd-pingpong).")] = None,
    no_dual_batch: Annotated[
        bool, typer.Option("--no-dual-batch", help="asap: no dual-batch interleaving.")
    ] = False,
    no_overlap: Annotated[
        bool, typer.Option("--no-overlap", help="asap: no overlap on expert dies.")
    ] = False,
    no_super_kernel: Annotated[
        bool, typer.Option("--no-super-kernel", help="asap: host-launched MoE kernels.")
    ] = False,
    expert_failure: Annotated[
        bool, typer.Option("--expert-failure", help="asap, coupled: lose one expert die.")
    ] = False,
    failed_rank: Annotated[int | None, typer.Option(help="coupled --expert-failure: the rank lost.")] = None,
    m: Annotated[int | None, typer.Option("--m", help="afd-pingpong: micro-batches.")] = None,
    chunk_tokens: Annotated[int | None, typer.Option(help="chunked: tokens per group per step.")] = None,
    costs: Annotated[
        Path | None, typer.Option("--costs", help="Cost model TOML (default: fitted to the store).")
    ] = None,
    save_costs: Annotated[
        Path | None, typer.Option("--save-costs", help="Write the cost model used as TOML.")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the replay as a store here.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing store at OUTPUT.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Replay a store's measured work under another runtime: measured vs replayed step time, recovered time by cause.

    Example: asaptrace replay run.store --policy asap --attention 4x4 --experts 16 -o asap.store
    """
    from asaptrace._cli_replay import print_replay, replay_params
    from asaptrace.replay.api import replay_store, save_result_costs

    params = replay_params(
        attention=attention,
        experts=experts,
        no_dual_batch=no_dual_batch,
        no_overlap=no_overlap,
        no_super_kernel=no_super_kernel,
        expert_failure=expert_failure,
        failed_rank=failed_rank,
        m=m,
        chunk_tokens=chunk_tokens,
    )
    result = replay_store(store, policy, params=params, costs=costs, out=output, overwrite=force)
    if save_costs is not None:
        save_result_costs(result, save_costs)
    print_json(result.to_json()) if as_json else print_replay(result)


# ---------------------------------------------------------------------------------------------- sweep
@app.command()
@user_errors
def sweep(
    scenario: Annotated[
        str, typer.Option(help="Shipped scenario name or a scenario TOML file.")
    ] = "asap-paper",
    policies: Annotated[
        str, typer.Option(help="Comma-separated; the first is the baseline of the ratios.")
    ] = "default,chunked,asap",
    rates: Annotated[
        str, typer.Option(help="Request rates per second, e.g. 1,2,4,8, or auto (doubling from 0.5).")
    ] = "auto",
    duration: Annotated[
        str | None, typer.Option(help="Arrivals per rate, then drained (default: the scenario's, 300s).")
    ] = None,
    slo_ttft: Annotated[
        str | None, typer.Option("--slo-ttft", help="SLO on mean TTFT (default: the scenario's, 5s).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of the one arrival stream shared by every rate.")
    ] = None,
    set_: Annotated[
        list[str],
        typer.Option("--set", help="Override one knob, KNOB=VALUE (repeatable; see docs/sweep.md)."),
    ] = [],  # noqa: B006
    costs: Annotated[
        Path | None,
        typer.Option(help="Cost model TOML (as written by replay) replacing the scenario's costs."),
    ] = None,
    workload: Annotated[
        Path | None, typer.Option(help="Mooncake JSONL or Azure CSV request trace, rescaled to each rate.")
    ] = None,
    lengths: Annotated[
        str, typer.Option(help="Poisson lengths: fit (the scenario's log-logistic) or a synth profile.")
    ] = "fit",
    at_rate: Annotated[float, typer.Option(help="Rate of the TTFT decomposition by length bucket.")] = 4.0,
    vary: Annotated[
        list[str], typer.Option(help="Re-run for each value of one knob, KNOB=V1,V2,… (repeatable).")
    ] = [],  # noqa: B006
    calibrate_ttft: Annotated[
        str | None, typer.Option(help="POLICY=MS@RATE: solve the cost scale for one measured point.")
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs", "-j", help="Processes over (policy, rate) points (0: one per core; 1: serial)."
        ),
    ] = 0,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the results as JSON (docs/sweep.md).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Online serving: rate → TTFT curves and SLO-compliant throughput per policy, with sensitivity.

    Example: asaptrace sweep --scenario asap-paper --rates 1,2,4,6,8 --vary k_s=1,2,4 -o sweep.json
    """
    from asaptrace import _cli_sweep as fmt
    from asaptrace.replay.scenario import load_scenario
    from asaptrace.replay.sensitivity import sweep_with_sensitivity
    from asaptrace.replay.sweep import SweepOptions, write_results

    sc = load_scenario(scenario)
    sc = sc.with_costs_file(costs) if costs else sc
    knobs = fmt.knob_overrides(set_, seed=seed, duration=duration, slo_ttft=slo_ttft)
    opt = SweepOptions(
        tuple(p.strip() for p in policies.split(",") if p.strip()),
        fmt.parse_rates(rates),
        decomposition_rate=at_rate,
        jobs=jobs,
        workload=str(workload) if workload else None,
        lengths=lengths,
    )
    with fmt.progress_line(enabled=not as_json) as progress:
        res = sweep_with_sensitivity(
            sc.with_knobs(knobs), opt, vary_specs=vary, calibrate_spec=calibrate_ttft, progress=progress
        )
    if output is not None:
        write_results(res, output)
    print_json(res) if as_json else fmt.print_sweep(res)
    if output is not None and not as_json:
        out.print(f"wrote [bold]{output}[/]")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
