"""Shared fixtures: where the real traces live (skip with a reason when they are absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real traces not available: {SHARED_DATA} is absent")
    return SHARED_DATA


SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture(scope="session")
def coupled_store(tmp_path_factory):
    """The 32-rank coupled sample (sample_traces/coupled/kineto), ingested and enriched once per session."""
    from asaptrace.enrich.pipeline import build_store

    return build_store(
        [SAMPLES / "coupled" / "kineto"], tmp_path_factory.mktemp("samples") / "coupled.store", jobs=1
    )


@pytest.fixture(scope="session")
def coupled_diagnosis(coupled_store):
    from asaptrace.analyze.diagnosis import diagnose_store

    return diagnose_store(coupled_store)
