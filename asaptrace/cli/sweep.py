"""``asaptrace sweep``: online serving, rate → TTFT curves and SLO throughput per policy (:func:`asaptrace.pipeline.sweep`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from asaptrace.cli._common import (
    CsvOpt,
    JsonOpt,
    ParquetOpt,
    check_tables,
    err,
    out,
    parse_sets,
    print_json,
    print_lines,
    print_table,
    print_warning,
    user_errors,
    write_tables,
)
from asaptrace.errors import UsageError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_SECONDS = {"ms": 1e-3, "s": 1.0, "": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


@user_errors
def sweep(
    scenario: Annotated[
        str, typer.Option(help="Shipped scenario name or a scenario TOML file.")
    ] = "asap-paper",
    policies: Annotated[
        str,
        typer.Option(
            help="Comma-separated online policies (`asaptrace policies`); the first is the ratios' baseline."
        ),
    ] = "coupled,chunked,asap",
    rates: Annotated[
        str, typer.Option(help="Request rates per second, e.g. 1,2,4,8, or auto (doubling from 0.5).")
    ] = "auto",
    duration: Annotated[
        str | None,
        typer.Option(
            help="Arrivals per rate, then drained (default: the scenario's, 300s); extended to 20 SLO intervals and 2,000 arrivals."
        ),
    ] = None,
    slo_ttft: Annotated[
        str | None, typer.Option("--slo-ttft", help="SLO on mean TTFT (default: the scenario's, 5s).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed of the one arrival stream shared by every rate.")
    ] = None,
    seeds: Annotated[
        int,
        typer.Option(
            "--seeds", min=1, help="Search the SLO rate on N seeds from --seed: the median, with the range."
        ),
    ] = 1,
    set_: Annotated[
        list[str],
        typer.Option(
            "--set",
            help="Override one knob, KNOB=VALUE, or a policy's setting, POLICY.SETTING=VALUE (asap.experts=12); repeatable, see docs/sweep.md.",
        ),
    ] = [],  # noqa: B006
    costs: Annotated[
        Path | None,
        typer.Option(help="Cost model TOML (as written by replay) replacing the scenario's costs."),
    ] = None,
    workload: Annotated[
        Path | None,
        typer.Option(
            help="A store, Mooncake JSONL or Azure CSV: requests rescaled to each rate, resampled when too few (≥ 2,000 arrivals per rate)."
        ),
    ] = None,
    lengths: Annotated[
        str, typer.Option(help="Poisson lengths: fit (the scenario's log-logistic) or a synth profile.")
    ] = "fit",
    at_rate: Annotated[float, typer.Option(help="Rate of the TTFT decomposition by length bucket.")] = 4.0,
    vary: Annotated[
        list[str],
        typer.Option(help="Re-run for each value of one knob or policy setting, KNOB=V1,V2,… (repeatable)."),
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
    executor: Annotated[
        str,
        typer.Option(
            help="local (this machine, --jobs processes) or ray: one Ray task per (policy, rate) point "
            "(`pip install 'asaptrace\\[ray]'`); the same results either way."
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster to run on (auto, HOST:6379, ray://HOST:10001); default: a local instance."
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the results as JSON (docs/sweep.md).")
    ] = None,
    csv: CsvOpt = None,
    parquet: ParquetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Online serving: rate → TTFT curves and SLO-compliant throughput per policy, with sensitivity.

    Example: asaptrace sweep --scenario asap-paper --rates 1,2,4,6,8 --vary k_s=1,2,4 -o sweep.json
    """
    from asaptrace.pipeline import sweep as run_sweep
    from asaptrace.views.sweep import sweep_tables

    check_tables(csv, parquet)
    if ray_address is not None and executor != "ray":
        raise typer.BadParameter("needs --executor ray", param_hint="--ray-address")
    with _progress_line(enabled=not as_json) as progress:
        res = run_sweep(
            scenario,
            policies=tuple(p.strip() for p in policies.split(",") if p.strip()),
            rates=_parse_rates(rates),
            knobs=_knob_overrides(set_, seed=seed, duration=duration, slo_ttft=slo_ttft),
            costs=costs,
            workload=workload,
            lengths=lengths,
            decomposition_rate=at_rate,
            jobs=jobs,
            vary=vary,
            calibrate=calibrate_ttft,
            progress=progress,
            out=output,
            executor=executor,
            ray_address=ray_address,
            seeds=seeds,
        )
    for line in res.get("cost_warnings", []):
        print_warning(line)
    print_json(res.to_json()) if as_json else _print_sweep(res)
    write_tables(sweep_tables(res), csv, parquet)
    if output is not None and not as_json:
        out.print(f"wrote [bold]{output}[/]")


def _parse_seconds(text: str, what: str) -> float:
    """'300s', '5m', '500ms', '5' → seconds."""
    m = _DURATION.match(text)
    if not m:
        raise UsageError(f"{what} takes a duration like 300s, 5m or 500ms, not {text!r}")
    return float(m.group(1)) * _SECONDS[m.group(2) or ""]


def _parse_rates(text: str) -> tuple[float, ...] | None:
    """'1,2,4' → (1.0, 2.0, 4.0); 'auto' → None."""
    if text.strip() == "auto":
        return None
    try:
        rates = tuple(float(r) for r in text.split(",") if r.strip())
    except ValueError:
        raise UsageError(f"--rates takes 'auto' or numbers like 1,2,4, not {text!r}") from None
    if not rates or min(rates) <= 0:
        raise UsageError("--rates must be positive numbers")
    return rates


def _knob_overrides(
    sets: list[str], *, seed: int | None, duration: str | None, slo_ttft: str | None
) -> dict[str, Any]:
    """--set KNOB=VALUE items plus the options that are knobs (--seed, --duration, --slo-ttft)."""
    knobs: dict[str, Any] = parse_sets(sets)
    if seed is not None:
        knobs["seed"] = seed
    if duration:
        knobs["duration_s"] = _parse_seconds(duration, "--duration")
    if slo_ttft:
        knobs["slo_ttft_s"] = _parse_seconds(slo_ttft, "--slo-ttft")
    return knobs


@contextmanager
def _progress_line(*, enabled: bool) -> Iterator[Any]:
    """A spinner counting simulated points on stderr (silent with --json or without a terminal)."""
    if not (enabled and err.is_terminal):
        yield None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # only with a terminal

    bar = Progress(
        SpinnerColumn(),
        TextColumn("sweep {task.completed} points  {task.description}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    task = bar.add_task("", total=None)
    with bar:
        yield lambda label: bar.update(task, advance=1, description=label)


def _print_sweep(res: Any) -> None:
    """The sweep's tables as every face shows them (:func:`asaptrace.views.sweep.sweep_views`, in
    the short layout on a narrow terminal), the paper's numbers beside ours, and the reading, every
    line wrapped to the terminal."""
    from asaptrace.views.sweep import paper_shares_line, sweep_at_1rps_line, sweep_header, sweep_views
    from asaptrace.views.table import narrow

    for line in sweep_header(res):
        print_lines(line, indent="  ")
    for view in sweep_views(res, width=out.width):
        print_table(view, answer=True)
        if view.name == "sweep-slo":
            print_lines(view.caption, indent="  ", style="dim")
            if narrow(out.width):
                print_lines(sweep_at_1rps_line(res), indent="  ", style="dim")
        if view.name == "sweep-curves":  # which points were steady states that did not hold
            print_lines(view.caption, indent="  ", style="dim")
        if view.name == "sweep-decomposition":
            paper = paper_shares_line(res)
            if paper:
                print_lines(paper, indent="  ", style="dim")
        if view.name == "sweep-tornado" and view.rows.height == 0:
            print_lines(view.caption, indent="  ", style="dim")
    print_lines(res["reading"], indent="  ")
