"""``asaptrace replay``: a store's measured work under another runtime (:func:`asaptrace.pipeline.replay_store`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from asaptrace.cli._common import (
    CsvOpt,
    JsonOpt,
    ParquetOpt,
    StoreArg,
    check_tables,
    out,
    parse_sets,
    print_json,
    print_table,
    print_warning,
    print_wrapped,
    user_errors,
    write_tables,
)


@user_errors
def replay(
    store: StoreArg,
    policy: Annotated[
        str, typer.Option(help="A registered policy or named ablation (`asaptrace policies` lists them).")
    ] = "asap",
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
    set_: Annotated[
        list[str],
        typer.Option(
            "--set",
            help="A setting of the policy, POLICY.SETTING=VALUE or SETTING=VALUE (asap.min_batch_tokens=4096; "
            "`asaptrace policies` lists each policy's); repeatable. The flags above are its aliases.",
        ),
    ] = [],  # noqa: B006
    split: Annotated[
        str | None,
        typer.Option(
            help="auto: replay every D×T + E of the store's device total and keep the best (asap, afd-pingpong)."
        ),
    ] = None,
    vary: Annotated[
        list[str] | None,
        typer.Option(
            help="KNOB=V1,V2 (repeatable): k_s, moe_e_ref, phi, scale, costs=fitted,default — the answer's range."
        ),
    ] = None,
    executor: Annotated[
        str,
        typer.Option(
            help="Where the --split auto / --vary replays run: local (--jobs processes) or ray, one Ray task "
            "each (`pip install 'asaptrace\\[ray]'`); the same answer either way."
        ),
    ] = "local",
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            min=0,
            help="local: processes for --split auto / --vary (1: this one; 0: one per core).",
        ),
    ] = 1,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster to run on (auto, HOST:6379, ray://HOST:10001); default: a local instance."
        ),
    ] = None,
    costs: Annotated[
        Path | None, typer.Option("--costs", help="Cost model TOML (default: fitted to the store).")
    ] = None,
    save_costs: Annotated[
        Path | None,
        typer.Option("--save-costs", help="Write the cost model used (with its fit quality) as TOML."),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the replay as a store here.")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing store at OUTPUT.")] = False,
    csv: CsvOpt = None,
    parquet: ParquetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay a store's measured work under another runtime: makespan and batch latency, recovered time by cause, the fit and the range.

    Example: asaptrace replay run.store --policy asap --split auto --vary k_s=1,2 -o asap.store
    """
    from asaptrace.pipeline import replay_store
    from asaptrace.views.replay import replay_tables

    check_tables(csv, parquet)
    settings = _replay_params(
        attention=attention,
        experts=experts,
        no_dual_batch=no_dual_batch,
        no_overlap=no_overlap,
        no_super_kernel=no_super_kernel,
        expert_failure=expert_failure,
        failed_rank=failed_rank,
        m=m,
        chunk_tokens=chunk_tokens,
    ) | parse_sets(set_, "POLICY.SETTING=VALUE")
    if ray_address is not None and executor != "ray":
        raise typer.BadParameter("needs --executor ray", param_hint="--ray-address")
    result = replay_store(
        store,
        policy,
        settings=settings,
        costs=costs,
        out=output,
        overwrite=force,
        split=split,
        vary=vary or (),
        executor=executor,
        jobs=jobs,
        ray_address=ray_address,
        save_costs=save_costs,
    )
    print_json(result.to_json()) if as_json else _print_replay(result.to_json())
    write_tables(replay_tables(result.to_json()), csv, parquet)
    for line in result.warnings:
        print_warning(line)


def _replay_params(**options: Any) -> dict[str, Any]:
    """The old flags, aliases of ``--set SETTING=V`` (None = the policy's default; --no-X → X=False)."""
    params = {k: v for k, v in options.items() if v is not None and not k.startswith("no_")}
    for flag in ("dual_batch", "overlap", "super_kernel"):
        if options.get(f"no_{flag}"):
            params[flag] = False
    if not params.get("expert_failure"):
        params.pop("expert_failure", None)
    return params


def _print_replay(j: dict[str, Any]) -> None:
    from asaptrace.views.replay import band_text, consistency_text, deployment_text, replay_views

    print_wrapped(
        out,
        f"[bold]{escape(j['store'])}[/] ",
        f"replayed as {j['policy']} on {deployment_text(j['deployment'])} "
        f"({j['events']:,} events in {j['seconds']:.2f} s)",
    )
    for view in replay_views(j):
        print_table(view)
    print_wrapped(out, "", band_text(j))
    print_wrapped(out, "", f"{consistency_text(j)}; costs: {j['costs'].get('source')}", style="dim")
    for note in j["notes"]:
        print_wrapped(out, "[dim]note:[/] ", note, style="dim")
    if j["out"]:
        out.print(f"wrote [bold]{escape(j['out'])}[/]")
