"""Sample stores for the replay tests, ingested once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import strategies as st

from asaptrace.ingest.driver import ingest_paths
from asaptrace.pipeline import enrich_store
from asaptrace.store import TraceStore

#: a random cost model, as the capacity properties draw it (ms; per 1K tokens): hypothesis arguments
COST_DRAWS = {
    "c1": st.floats(0.3, 3.0),
    "c2": st.floats(0.0, 0.05),
    "moe_a": st.floats(0.02, 0.4),
    "moe_b": st.floats(0.05, 0.6),
    "plateau": st.floats(0.1, 1.0),
    "lat": st.floats(0.0, 0.3),
    "per_k": st.floats(0.0, 1.0),
    "layers": st.integers(1, 4),
}


def cost_knobs(
    c1: float, c2: float, moe_a: float, moe_b: float, plateau: float, lat: float, per_k: float, layers: int
) -> dict[str, float]:
    """The scenario knobs of one :data:`COST_DRAWS` draw."""
    return {
        "layers": layers,
        "attn_c1_ms": c1,
        "attn_c2_ms": c2,
        "moe_a_ms": moe_a,
        "moe_b_ms": moe_b,
        "moe_plateau_ms": plateau,
        "xfer_latency_ms": lat,
        "xfer_per_k_ms": per_k,
    }


SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
RUNS = {  # sample → folder of its trace files
    "coupled": "kineto",
    "coupled-hot-expert": "kineto",
    "coupled-ascend": "ascend",
    "disaggregated": "kineto",
}
COUPLED = ["coupled", "coupled-hot-expert", "coupled-ascend"]
_cache: dict[str, TraceStore] = {}


def sample_store(name: str, tmp_root: Path) -> TraceStore:
    """The enriched store of sample ``name`` (skips when the sample is absent)."""
    if name not in _cache:
        folder = SAMPLES / name / RUNS[name]
        if not folder.is_dir():
            pytest.skip(
                f"sample trace {folder} is absent (regenerate with `asaptrace synth --preset {name}`)"
            )
        _cache[name] = enrich_store(ingest_paths([folder], tmp_root / f"{name}.store", jobs=2))
    return _cache[name]
