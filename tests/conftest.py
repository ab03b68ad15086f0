"""Shared fixtures: where the real traces live (skip with a reason when they are absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: ``../shared/data`` beside the checkout; ASAPTRACE_SHARED_DATA names it for a checkout elsewhere
#: (a git worktree one folder deeper)
SHARED_DATA = Path(
    os.environ.get("ASAPTRACE_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real traces not available: {SHARED_DATA} is absent")
    return SHARED_DATA


SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
#: sample → folder of its trace files
SAMPLE_RUNS = {
    "coupled": "kineto",
    "coupled-hot-expert": "kineto",
    "coupled-ascend": "ascend",
    "disaggregated": "kineto",
}


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory):
    """``get(name) -> (truth, store, diagnosis)`` for a bundled sample, ingested once per session."""
    import json

    from asaptrace.ingest.driver import ingest_paths
    from asaptrace.pipeline import diagnose_store, enrich_store
    from tests._analysis_helpers import check_one_meaning

    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            folder = SAMPLES / name
            if not (folder / "truth.json").is_file():
                pytest.skip(
                    f"sample trace {folder} is absent (regenerate with `asaptrace synth --preset {name}`)"
                )
            store = ingest_paths([folder / SAMPLE_RUNS[name]], tmp_path_factory.mktemp(name) / "s", jobs=2)
            store = enrich_store(store)
            truth = json.loads((folder / "truth.json").read_text())
            diag = diagnose_store(store)
            check_one_meaning(diag.tables)  # every sample store keeps one meaning of "exposed"
            cache[name] = (truth, store, diag)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def coupled_store(sample_run):
    """The 32-rank coupled sample (sample_traces/coupled/kineto), ingested and enriched once per session."""
    return sample_run("coupled")[1]


@pytest.fixture(scope="session")
def coupled_diagnosis(sample_run):
    return sample_run("coupled")[2]
