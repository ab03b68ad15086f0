"""Executors: every one builds the same store; Ray errors reach the user as the project's one line.

The Ray tests start a local Ray instance through the CLI (≈ 5–10 s on a 2-core machine) and skip
with a reason when Ray is not installed (`pip install 'asaptrace[ray]'`) or the DLRM traces are
absent.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys

import polars as pl
import pytest

from asaptrace.errors import RegistryError
from asaptrace.executors import EXECUTORS, default_jobs, register_executor
from asaptrace.store import TraceStore
from tests._cli import run_cli

RAY_MISSING = importlib.util.find_spec("ray") is None
needs_ray = pytest.mark.skipif(RAY_MISSING, reason="ray is not installed (pip install 'asaptrace[ray]')")


@pytest.fixture(scope="module")
def dlrm(shared_data):
    folder = shared_data / "traces" / "kineto-dlrm-8rank"
    if not folder.is_dir():
        pytest.skip(f"DLRM traces not available: {folder} is absent")
    return folder


def _table(store: TraceStore, name: str, key: list[str]) -> pl.DataFrame:
    return store.read(name).with_columns(pl.col(pl.Categorical).cast(pl.String)).sort(key)


@needs_ray
def test_ray_executor_builds_the_same_store_as_the_default(dlrm, tmp_path):
    assert run_cli("ingest", dlrm, "-o", tmp_path / "default").code == 0
    run = run_cli("ingest", dlrm, "-o", tmp_path / "ray", "--executor", "ray", "--jobs", "2")
    assert run.code == 0, run.stderr
    a, b = TraceStore.open(tmp_path / "default"), TraceStore.open(tmp_path / "ray")
    # event for event: same rows, same enrichment (kinds, steps, clock-aligned times)
    assert b.ranks().collect().height == 8 and b.read("events").height > 10_000  # not two empty stores
    assert _table(a, "events", ["rank", "eid"]).equals(_table(b, "events", ["rank", "eid"]))
    assert _table(a, "ranks", ["rank"]).equals(_table(b, "ranks", ["rank"]))
    assert a.meta["accounting"] == b.meta["accounting"]
    assert [s["accounting"] for s in a.meta["sources"]] == [s["accounting"] for s in b.meta["sources"]]


@needs_ray
def test_an_error_inside_a_ray_task_is_the_same_one_line(dlrm, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    good = sorted(dlrm.glob("*.json"))[0]
    shutil.copy(good, folder / good.name)
    (folder / "worker1_cut.json").write_bytes(good.read_bytes()[:5000])  # truncated mid-event
    serial = run_cli("ingest", folder, "-o", tmp_path / "a", "--executor", "serial")
    ray = run_cli("ingest", folder, "-o", tmp_path / "b", "--executor", "ray", "--jobs", "2")
    assert serial.code == ray.code == 2
    assert "worker1_cut.json: invalid JSON" in serial.stderr
    assert ray.stderr == serial.stderr and len(ray.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_ray_executor_without_ray_says_how_to_install_it(tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "rank0.json").write_text('{"traceEvents": []}')
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as when absent
    run = run_cli("ingest", folder, "-o", tmp_path / "s", "--executor", "ray")
    assert run.code == 2
    assert "pip install 'asaptrace[ray]'" in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_unknown_executor_and_stray_ray_address_are_user_errors(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "rank0.json").write_text('{"traceEvents": []}')
    run = run_cli("ingest", folder, "-o", tmp_path / "s", "--executor", "dask")
    assert run.code == 2 and "unknown executor 'dask' (known: process, ray, serial, thread)" in run.stderr
    run = run_cli("ingest", folder, "-o", tmp_path / "s", "--ray-address", "auto")
    assert run.code == 2 and "needs --executor ray" in run.stderr


def test_built_in_executors_are_registered_and_names_are_unique():
    assert {"serial", "thread", "process", "ray"} <= set(EXECUTORS.names())
    with pytest.raises(RegistryError, match="already registered"):
        register_executor("serial", EXECUTORS.get("serial"))


GiB = 1024**3


@pytest.mark.parametrize(
    ("n_files", "cpus", "total_bytes", "expected"),
    [
        (1, 64, 100 * GiB, 1),  # one file: a pool only adds start-up
        (8, 2, 100 * GiB, 1),  # 2 cores: one task already keeps both busy (scan + hash)
        (8, 3, 100 * GiB, 1),  # still below 4 CPUs
        (8, 4, 100 * GiB, 2),  # 4 CPUs / 2 per task
        (8, 16, 100 * GiB, 8),  # 16 / 2 = 8, one per file
        (3, 16, 100 * GiB, 3),  # capped by the file count
        (8, 16, 1 * GiB, 4),  # 1 GiB / 256 MiB per worker = 4
        (8, 16, 7 * 1024**2, 1),  # the 8 small DLRM traces (7 MiB): start-up would dominate
        (8, 16, None, 8),  # size unknown (an explicit process executor): cores and files only
    ],
)
def test_default_jobs_is_never_a_pool_that_cannot_pay_off(n_files, cpus, total_bytes, expected):
    assert default_jobs(n_files, cpus, total_bytes) == expected
