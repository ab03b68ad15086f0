"""Shared fixtures: where the real traces live (skip with a reason when they are absent)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
from pathlib import Path

import pytest


def _dashboards_of_this_checkout() -> None:
    """Make ``import asaptrace_dashboards`` load this checkout's ``dashboards/`` folder.

    Installed, the folder *is* ``asaptrace_dashboards`` (pyproject.toml's ``package-dir``); from a
    checkout that name would find nothing, or another checkout's editable install. As ``pythonpath =
    ["."]`` does for ``asaptrace``, a link under that name, first on the path of this process and of
    the ones it starts (``asaptrace dashboard``, the dashboard's spawned jobs), binds it to this tree.
    """
    checkout = Path(__file__).resolve().parents[1]
    key = hashlib.sha1(str(checkout).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"asaptrace-checkout-{key}"
    link = folder / "asaptrace_dashboards"
    if not link.is_symlink():
        folder.mkdir(exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another test process made it first
            link.symlink_to(checkout / "dashboards", target_is_directory=True)
    sys.path.insert(0, str(folder))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))


_dashboards_of_this_checkout()

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
            # every sample store keeps one meaning of "exposed" and counts every nanosecond once
            check_one_meaning(diag.tables, store.events())
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
