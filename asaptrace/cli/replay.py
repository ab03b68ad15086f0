"""``asaptrace replay``: a store's measured work under another runtime (:func:`asaptrace.pipeline.replay_store`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from asaptrace.cli._common import JsonOpt, StoreArg, out, print_json, user_errors
from asaptrace.units import human_ns

if TYPE_CHECKING:
    from asaptrace.replay.run import ReplayResult


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
    from asaptrace.pipeline import replay_store
    from asaptrace.replay.run import save_result_costs

    params = _replay_params(
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
    print_json(result.to_json()) if as_json else _print_replay(result)


def _replay_params(**options: Any) -> dict[str, Any]:
    """CLI options → policy parameters (None = the policy's default; --no-X flags → X=False)."""
    params = {k: v for k, v in options.items() if v is not None and not k.startswith("no_")}
    for flag in ("dual_batch", "overlap", "super_kernel"):
        if options.get(f"no_{flag}"):
            params[flag] = False
    if not params.get("expert_failure"):
        params.pop("expert_failure", None)
    return params


def _pct(a: int, b: int) -> str:
    return f"{100 * (a - b) / b:+.1f}%" if b else "-"


def _print_replay(r: ReplayResult) -> None:
    dep = r.deployment
    shape = (
        f"{dep['groups']}×{dep['tp']} attention + {dep['experts']} expert dies"
        if dep["kind"] == "disaggregated"
        else f"DP{dep['groups']}×TP{dep['tp']} coupled"
    )
    err = f"{r.reference_policy} reproduction error {r.error_mean_pct:.2f}% mean, {r.error_max_pct:.2f}% max"
    out.print(
        f"[bold]{r.store}[/] replayed as [bold]{r.policy}[/] ({shape}, {r.events:,} events in {r.seconds:.2f} s)"
    )
    steps = Table(
        "step",
        "measured",
        r.reference_policy + " replay",
        r.policy,
        "vs measured",
        title="step time",
        title_justify="left",
    )
    for s in r.steps:
        steps.add_row(
            str(s["step"]),
            human_ns(s["measured_ns"]),
            human_ns(s["reference_ns"]),
            human_ns(s["replayed_ns"]),
            _pct(s["replayed_ns"], s["measured_ns"]),
        )
    steps.add_row(
        "all",
        human_ns(r.measured_ns),
        human_ns(r.reference_ns),
        human_ns(r.replayed_ns),
        _pct(r.replayed_ns, r.measured_ns),
    )
    out.print(steps)
    if r.recovered_ns:
        causes = Table(
            "cause",
            "recovered",
            "share of coupled",
            title=f"recovered time by cause (± {r.error_max_pct:.1f}%: {err})",
            title_justify="left",
        )
        for cause, ns in r.recovered_ns.items():
            causes.add_row(
                cause.replace("_", " "),
                human_ns(ns),
                f"{100 * ns / r.baseline_ns:+.1f}%" if r.baseline_ns else "-",
            )
        total = sum(r.recovered_ns.values())
        causes.add_row(
            "total", human_ns(total), f"{100 * total / r.baseline_ns:+.1f}%" if r.baseline_ns else "-"
        )
        out.print(causes)
    out.print(f"{err}; simulated barrier wait {human_ns(r.simulated_wait_ns)}; costs: {r.costs['source']}")
    if r.cost_fit:
        fit = ", ".join(f"{k} R² {v['r2']:.2f}" for k, v in r.cost_fit.items() if "r2" in v)
        if fit:
            out.print(f"[dim]cost fit: {fit}[/]")
    for note in r.notes:
        out.print(f"[dim]note: {note}[/]")
    if r.out:
        out.print(f"wrote [bold]{r.out}[/]")
