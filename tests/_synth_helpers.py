"""Shared pieces of the synth tests: a tiny fast configuration, trace readers, truth lookups."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from asaptrace.synth.config import SynthConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
WORKLOADS = SHARED_DATA / "workloads"
ASCEND_SAMPLE = SHARED_DATA / "traces" / "ascend-sample" / "trace_view.json"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real data not available: {path} is absent")
    return path


def tiny(preset: str = "coupled", **sections: dict[str, Any]) -> SynthConfig:
    """A preset shrunk to 6 layers (2 dense), 16 experts and 4 + 4 ranks: simulated in milliseconds."""
    cfg = load_config(preset)
    model = replace(cfg.model, layers=6, dense_layers=2, experts=16, top_k=4)
    dep = replace(
        cfg.deployment,
        dp=2,
        tp=2,
        attn_dp=2,
        attn_tp=2,
        expert_devices=4,
        step_tokens=65536,
        devices_per_node=2,
    )
    cfg = replace(cfg, model=model, deployment=dep)
    for name, changes in sections.items():
        cfg = replace(cfg, **{name: replace(getattr(cfg, name), **changes)})
    return cfg


def read_json_gz(path: Path) -> Any:
    return json.loads(gzip.decompress(path.read_bytes()))


def kineto_kernels(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]


def ns(us_value: float) -> int:
    """A µs timestamp as written (3 decimals) back to integer ns."""
    return round(us_value * 1000)


_TWINS: dict[tuple[Any, ...], Any] = {}


def twin_work(
    root: Path,
    sigma: float,
    split: tuple[int, int, int] | None,
    *,
    contention: float = 0.0,
    seed: int = 3,
    noise_seed: int = -1,
    routing_skew: float | None = None,
    **clock,
):
    """The measured work of a replay twin: the coupled preset's requests (12 layers, one step of
    131072 tokens, ``seed``; ``noise_seed`` ≥ 0: the same requests under another draw of the
    execution; ``routing_skew``: ``[straggler] routing_skew``, each layer's expert popularity)
    run coupled (``split`` None) or disaggregated D×T + E, kernel noise
    ``sigma``, link ``contention``; ``clock`` overrides ``[clock]`` (``offset_max_us=0``: clocks
    agree). Synthesised and ingested once under ``root``, extracted once per process."""
    key = (root, sigma, split, contention, seed, noise_seed, routing_skew, tuple(sorted(clock.items())))
    if key not in _TWINS:
        _TWINS[key] = _twin_work(root, sigma, split, contention, (seed, noise_seed), routing_skew, clock)
    return _TWINS[key]


def predict_asap(wl: Any, split: tuple[int, int, int]) -> Any:
    """The ASAP prediction of a twin's ``split`` D×T + E (dual batch below 8 groups, as synth runs it)."""
    from asaptrace.replay.whatif.run import replay_measured_work

    d, t, e = split
    params = {"attention": f"{d}x{t}", "experts": e, "long_tokens": 0, "dual_batch": d < 8}
    return replay_measured_work(wl, "asap", params=params, attribute=False)


def work_makespan(wl: Any) -> int:
    """A measured work's span, first step start to last step end (ns)."""
    return int(wl.steps["end_ns"].max() - wl.steps["start_ns"].min())


def _twin_work(
    root: Path,
    sigma: float,
    split: tuple[int, int, int] | None,
    contention: float,
    seeds: tuple[int, int],
    routing_skew: float | None,
    clock: dict[str, Any],
):
    from asaptrace.ingest.driver import ingest_paths
    from asaptrace.pipeline import enrich_store
    from asaptrace.replay.whatif.measured import extract_measured_work
    from asaptrace.store import TraceStore
    from asaptrace.synth.run import synthesize

    cfg = load_config("coupled")
    straggler = cfg.straggler if routing_skew is None else replace(cfg.straggler, routing_skew=routing_skew)
    dep = replace(cfg.deployment, step_tokens=131072, micro_batches=1)
    if split:
        d, t, e = split
        dep = replace(dep, mode="disaggregated", attn_dp=d, attn_tp=t, expert_devices=e, dual_batch=d < 8)
    cfg = replace(
        cfg,
        model=replace(cfg.model, layers=12, dense_layers=1),
        deployment=dep,
        costs=replace(cfg.costs, jitter=sigma, contention=contention),
        straggler=straggler,
        clock=replace(cfg.clock, **clock),
        run=replace(cfg.run, steps=1, seed=seeds[0], noise_seed=seeds[1]),
    )
    clocks = "".join(f"-{k}{v}" for k, v in sorted(clock.items()))  # no [ ]: polars globs them
    seeded = (f"-seed{seeds[0]}" if seeds[0] != 3 else "") + (f"-noise{seeds[1]}" if seeds[1] >= 0 else "")
    seeded += f"-skew{routing_skew}" if routing_skew is not None else ""
    out = root / f"{sigma}-{contention}-{split}{clocks}{seeded}".replace(" ", "")
    if not (out / "s.store").exists():
        synthesize(cfg, out / "run")
        enrich_store(ingest_paths([out / "run" / "kineto"], out / "s.store", jobs=1))
    return extract_measured_work(TraceStore.open(out / "s.store"))
