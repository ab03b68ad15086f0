"""``asaptrace sweep``: online serving, rate → TTFT curves and SLO throughput per policy (:func:`asaptrace.pipeline.sweep`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Column, Table

from asaptrace.cli._common import JsonOpt, err, out, print_json, user_errors
from asaptrace.errors import UsageError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_SECONDS = {"ms": 1e-3, "s": 1.0, "": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


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
    from asaptrace.pipeline import sweep as run_sweep

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
        )
    for line in res.get("cost_warnings", []):
        err.print(f"[bold yellow]warning:[/] {escape(line)}", soft_wrap=True)
    print_json(res) if as_json else _print_sweep(res)
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


def _parse_sets(items: list[str]) -> dict[str, str]:
    out_: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set takes KNOB=VALUE, not {item!r}")
        out_[key.strip()] = value.strip()
    return out_


def _knob_overrides(
    sets: list[str], *, seed: int | None, duration: str | None, slo_ttft: str | None
) -> dict[str, Any]:
    """--set KNOB=VALUE items plus the options that are knobs (--seed, --duration, --slo-ttft)."""
    knobs: dict[str, Any] = _parse_sets(sets)
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


def _policy_col() -> Column:
    return Column("policy", no_wrap=True)


def _ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:,.0f}"


def _rps(v: float | None, censored: bool = False) -> str:
    if v is None:
        return "< lowest"
    return f"≥ {v:.2f}" if censored else f"{v:.2f}"


def _print_sweep(res: dict[str, Any]) -> None:
    """The sweep's tables, the paper's numbers beside ours, and the reading."""
    pols, paper = res["policies"], res.get("paper") or {}
    k = res["knobs"]
    out.print(
        f"[bold]sweep[/] scenario {res['scenario']}, {res['workload']}, {res['duration_ns'] / 1e9:g} s per rate, "
        f"SLO mean TTFT ≤ {res['slo_ttft_ns'] / 1e9:g} s, seed {k['seed']}"
    )
    out.print(
        f"knobs assumed: k_s {k['coupled_k_s']:g}, E_ref {k['moe_e_ref']:g}, φ {k['attn_phi']:g}, "
        f"Default routing {k['default_routing']}, cost scale {k['cost_scale']:g} ({k['cost_source']}); "
        f"Default {k['default_dp']}×{k['default_tp']}, ASAP {k['asap_dp']}×{k['asap_tp']}+{k['asap_experts']}, "
        f"{k['layers']} layers",
        soft_wrap=True,
    )
    out.print(f"costs: {escape(res['costs_from'])}", soft_wrap=True)
    if res.get("calibration"):
        c = res["calibration"]
        out.print(
            f"calibrated: cost scale {c['cost_scale']:g} makes {c['policy']} {c['target_ms']:g} ms at {c['rate']:g}/s"
        )
    if res.get("lengths_fit"):
        f = res["lengths_fit"]
        qs = "  ".join(f"{q} {f[q]:,.0f}" for q in f if q.startswith("q"))
        out.print(
            f"lengths: log-logistic α {f['alpha']:,.0f} β {f['beta']:.3f} truncated to [{f['lo']}, {f['hi']}]: "
            f"mean {f['mean']:,.0f}, mode {f['mode']:,.0f}; quantiles {qs}",
            soft_wrap=True,
        )
    ref_rps, ref_1 = paper.get("slo_rps", {}), paper.get("mean_ttft_ms_at_1rps", {})
    base_paper = ref_rps.get(pols[0])
    t = Table(
        _policy_col(),
        "SLO RPS",
        "ratio",
        "paper RPS",
        "paper ratio",
        "mean TTFT @1/s ms",
        "paper @1/s ms",
        title="SLO-compliant throughput",
        title_justify="left",
    )
    for p in pols:
        pr = ref_rps.get(p)
        t.add_row(
            p,
            _rps(res["slo_rps"][p], res["slo_censored"][p]),
            "-" if res["ratios"][p] is None else f"{res['ratios'][p]:.2f}×",
            "-" if pr is None else f"{pr:g}",
            "-" if pr is None or not base_paper else f"{pr / base_paper:.2f}×",
            _ms(res["mean_ttft_ns_at_1rps"][p]),
            "-" if p not in ref_1 else f"{ref_1[p]:g}",
        )
    out.print(t)
    _print_curves(res)
    _print_decomposition(res)
    if res.get("vary"):
        _print_vary(res)
    out.print(escape(res["reading"]), soft_wrap=True)


def _print_curves(res: dict[str, Any]) -> None:
    pols = res["policies"]
    rates = sorted({row["rate"] for p in pols for row in res["curves"][p]})
    by = {(p, row["rate"]): row for p in pols for row in res["curves"][p]}
    p99 = len(pols) <= 3  # wider sweeps show the mean only (p50 and p99 are in --json)
    head = [f"{p} mean / p99" if p99 else f"{p} mean" for p in pols]
    t = Table("rate /s", *head, title="TTFT by rate (ms)", title_justify="left")
    for r in rates:
        cells = []
        for p in pols:
            row = by.get((p, r))
            if row is None:
                cells.append("")
            else:
                cells.append(_ms(row["mean_ttft_ns"]) + (f" / {_ms(row['p99_ttft_ns'])}" if p99 else ""))
        t.add_row(f"{r:g}", *cells)
    out.print(t)


def _print_decomposition(res: dict[str, Any]) -> None:
    t = Table(
        _policy_col(),
        "prompt tokens",
        "requests",
        "mean TTFT ms",
        "queue",
        "own",
        "sync",
        title=f"TTFT decomposition at {res['decomposition_rate']:g}/s",
        title_justify="left",
    )
    for b in res["decomposition"]:
        t.add_row(
            b["policy"],
            b["bucket"],
            f"{b['n_requests']:,}",
            _ms(b["mean_ttft_ns"]),
            f"{100 * b['queue_share']:.0f}%",
            f"{100 * b['own_share']:.0f}%",
            f"{100 * b['sync_share']:.0f}%",
        )
    out.print(t)
    short = (res.get("paper") or {}).get("short_request_shares")
    if short:
        out.print(
            f"[dim]paper: Default at {short['rate']:g}/s, requests < {short['below_tokens']} tokens: "
            f"synchronisation {100 * short['sync']:.0f}%, queueing {100 * short['queue']:.0f}% of TTFT[/]"
        )


def _print_vary(res: dict[str, Any]) -> None:
    from asaptrace.replay.sweep import headline_policy  # the CLI loads no replay module at start

    pols = res["policies"]
    t = Table(
        Column("knob", no_wrap=True),
        "value",
        *[f"{p} RPS" for p in pols],
        f"{headline_policy(pols)}/{pols[0]}",
        title="sensitivity (one knob at a time)",
        title_justify="left",
    )
    for r in res["vary"]:
        t.add_row(
            r["knob"],
            r["value"],
            *[_rps(r["slo_rps"][p]) for p in pols],
            "-" if r["ratio"] is None else f"{r['ratio']:.2f}×",
        )
    out.print(t)
    if not res.get("tornado"):
        out.print(
            "tornado: no ratio to compare (the SLO was met at every rate swept, or missed at the lowest)"
        )
    else:
        tt = Table("knob", "ratio range", "swing", title="tornado (widest first)", title_justify="left")
        for e in res["tornado"]:
            tt.add_row(
                e["knob"],
                f"{e['ratio_min']:.2f}× ({e['at_min']}) – {e['ratio_max']:.2f}× ({e['at_max']})",
                f"{e['ratio_max'] - e['ratio_min']:.2f}",
            )
        out.print(tt)
