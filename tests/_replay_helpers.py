"""Sample stores for the replay tests, ingested once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from asaptrace.enrich import enrich_store
from asaptrace.ingest.driver import ingest_paths
from asaptrace.store import TraceStore

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
