"""``asaptrace synth``: synthetic MoE prefill traces with a ground truth (:func:`asaptrace.pipeline.synthesize`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from asaptrace.cli._common import PhaseBar, out, print_wrapped, user_errors
from asaptrace.units import human_bytes, plural


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
    from asaptrace.pipeline import synth_config, synth_presets, synthesize

    if list_presets:
        for name, text in synth_presets().items():
            print_wrapped(out, f"[bold]{name}[/]  ", text)
        return
    if out_dir is None:
        raise typer.BadParameter("is required (unless --list-presets)", param_hint="-o/--out")
    with PhaseBar("synth") as bar:
        res = synthesize(synth_config(preset, config, seed=seed, steps=steps, fmt=fmt), out_dir, progress=bar)
    out.print(
        f"wrote [bold]{res.out_dir}[/]: {plural(res.world_size, 'rank')}, {plural(res.steps, 'step')}, "
        f"{plural(res.events, 'event')}, "
        f"{human_bytes(res.bytes_written)} in {res.seconds:.1f} s"
    )
