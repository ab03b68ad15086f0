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
