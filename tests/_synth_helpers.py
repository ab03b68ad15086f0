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
