"""``synthesize``: one call from a configuration to a directory of traces plus ``truth.json``.

Output layout (the directory is written to a temporary sibling and renamed into place, so a crash
never leaves half a run; an existing directory is replaced only if it is a previous synth output):

    OUT/config.toml                  the resolved configuration (re-runnable with --config)
    OUT/truth.json                   ground truth, for tests only (see truth.py)
    OUT/kineto/rank000.pt.trace.json.gz …            (format kineto or both)
    OUT/ascend/dp0_pp0_tp0_ep0_rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json …  (ascend or both)

Traces live in their own sub-folders so that ``asaptrace ingest OUT/kineto`` sees trace files only.
Randomness: one ``SeedSequence(seed)`` is split into independent streams for the workload, the
execution model and the clocks, so the coupled and disaggregated presets with the same seed get
the same requests. ``[run] noise_seed`` (≥ 0) draws the execution stream from a seed of its own:
the same requests and clocks run again under another draw of the kernel noise and the routing.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from asaptrace.errors import UsageError
from asaptrace.replay.mechanics.planner import plan_coupled, plan_disaggregated
from asaptrace.synth.config import SynthConfig, config_toml, load_config
from asaptrace.synth.coupled import coupled_ranks, simulate_coupled
from asaptrace.synth.disaggregated import disaggregated_ranks, simulate_disaggregated
from asaptrace.synth.timeline import RankMeta, Timeline, TimelineBuilder
from asaptrace.synth.truth import assemble, write_truth
from asaptrace.units import plural
from asaptrace.userfiles import check_output_dir
from asaptrace.workload.requests import make_requests

TRUTH_FILE = "truth.json"
CONFIG_FILE = "config.toml"
README_FILE = "README.md"


@dataclass
class SynthResult:
    """What a run wrote."""

    out_dir: Path
    world_size: int
    steps: int
    kernels: int
    events: int  # trace events written (all formats)
    files: list[Path] = field(default_factory=list)
    bytes_written: int = 0
    seconds: float = 0.0


def build_timeline(cfg: SynthConfig) -> Timeline:
    """Simulate the run (no I/O)."""
    wl_seq, ex_seq, clock_seq = np.random.SeedSequence(cfg.run.seed).spawn(3)
    if cfg.run.noise_seed >= 0:  # the same requests and clocks, another draw of the execution
        ex_seq = np.random.SeedSequence(cfg.run.noise_seed).spawn(3)[1]
    reqs = make_requests(cfg.workload, np.random.default_rng(wl_seq))
    d = cfg.deployment
    rng = np.random.default_rng(ex_seq)
    builder = TimelineBuilder()
    if d.mode == "coupled":
        plans = plan_coupled(reqs, cfg.run.steps, d.step_tokens, d.dp, d.micro_batches)
        ranks = coupled_ranks(cfg)
        parts = simulate_coupled(cfg, reqs, plans, rng, builder)
    else:
        plans = plan_disaggregated(reqs, cfg.run.steps, d.step_tokens, d.attn_dp, d.dual_batch)
        ranks = disaggregated_ranks(cfg)
        parts = simulate_disaggregated(cfg, reqs, plans, rng, builder)
    offsets = clock_offsets(cfg, ranks, np.random.default_rng(clock_seq))
    truth = assemble(cfg, ranks, offsets, reqs, plans, parts, builder.annotations)
    return builder.build(ranks, offsets, cfg.clock.epoch_ns, truth)


def clock_offsets(cfg: SynthConfig, ranks: list[RankMeta], rng: np.random.Generator) -> np.ndarray:
    """ns added to each rank's timestamps; rank 0 (and its node, with ``per = node``) is the reference."""
    span = int(cfg.clock.offset_max_us * 1000)
    keys = [r.node for r in ranks] if cfg.clock.per == "node" else [r.rank for r in ranks]
    n_keys = max(keys) + 1
    per_key = rng.integers(-span, span + 1, n_keys) if span > 0 else np.zeros(n_keys, np.int64)
    per_key[keys[0]] = 0
    return np.array([per_key[k] for k in keys], np.int64)


def synthesize(
    cfg: SynthConfig, out_dir: str | Path, *, progress: Callable[[str, int, int], None] | None = None
) -> SynthResult:
    """Simulate ``cfg`` and write its traces (format ``cfg.run.format``) and truth into ``out_dir``.

    ``progress(phase, done, total)`` is told what is being done: ``simulate`` (0/1), then
    ``write kineto`` / ``write ascend`` rank by rank, then ``truth``."""
    tell = progress or (lambda phase, done, total: None)
    t_start = time.perf_counter()
    out = Path(out_dir)
    _check_target(out)
    tell("simulate", 0, 1)
    tl = build_timeline(cfg)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o755)
    try:
        files: list[Path] = []
        events = 0
        if cfg.run.format in ("kineto", "both"):
            from asaptrace.synth.kineto_writer import write_kineto

            written, n = write_kineto(
                tl, tmp / "kineto", progress=lambda r: tell("write kineto", r, tl.world_size)
            )
            files += written
            events += n
        if cfg.run.format in ("ascend", "both"):
            from asaptrace.synth.ascend_writer import write_ascend

            written, n = write_ascend(
                tl, tmp / "ascend", progress=lambda r: tell("write ascend", r, tl.world_size)
            )
            files += written
            events += n
        tell("truth", tl.world_size, tl.world_size)
        (tmp / CONFIG_FILE).write_text(config_toml(cfg))
        (tmp / README_FILE).write_text(readme_text(cfg, out, tl))
        write_truth(tl.truth, tmp / TRUTH_FILE)
        size = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    files = [out / p.relative_to(tmp) for p in files]
    steps = len({int(s) for s in tl.k_step.tolist()}) if tl.kernel_count else 0
    return SynthResult(
        out, tl.world_size, steps, tl.kernel_count, events, files, size, time.perf_counter() - t_start
    )


def reproduce_command(cfg: SynthConfig, out: Path) -> str:
    """The shortest ``asaptrace synth`` command that regenerates this run into ``out``."""
    if cfg.preset:
        base = load_config(cfg.preset)
        flags = [f"--preset {cfg.preset}"]
        for flag, mine, theirs in (
            ("--seed", cfg.run.seed, base.run.seed),
            ("--steps", cfg.run.steps, base.run.steps),
            ("--format", cfg.run.format, base.run.format),
        ):
            if mine != theirs:
                flags.append(f"{flag} {mine}")
        if cfg == load_config(cfg.preset, seed=cfg.run.seed, steps=cfg.run.steps, fmt=cfg.run.format):
            return f"asaptrace synth {' '.join(flags)} -o {out}"
    return f"asaptrace synth --config {out / CONFIG_FILE} -o {out}"


def readme_text(cfg: SynthConfig, out: Path, tl: Timeline) -> str:
    d = cfg.deployment
    shape = (
        f"coupled DP{d.dp}xTP{d.tp} / EP{d.dp * d.tp}"
        if d.mode == "coupled"
        else f"disaggregated {d.attn_dp}x{d.attn_tp} attention + {d.expert_devices} MoE devices"
    )
    layout = {
        "kineto": "kineto/rank*.pt.trace.json.gz",
        "ascend": "ascend/*_ascend_pt/",
        "both": "kineto/ and ascend/",
    }[cfg.run.format]
    return (
        f"# {cfg.preset or 'custom'}: {cfg.description or shape}\n\n"
        f"Synthetic MoE prefill traces ({shape}, {plural(tl.world_size, 'rank')}, {plural(cfg.run.steps, 'step')}, seed "
        f"{cfg.run.seed}), written by asaptrace synth. Traces: `{layout}`; `truth.json` is the generator's "
        f"ground truth (for tests only); `config.toml` the resolved configuration.\n\n"
        f"Regenerate (bit-for-bit): `{reproduce_command(cfg, out)}`\n"
    )


def _check_target(out: Path) -> None:
    check_output_dir(out, what="synth output folder")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / TRUTH_FILE).is_file())):
        raise UsageError(
            "output exists and is not an asaptrace synth output (refusing to replace it)", path=out
        )
