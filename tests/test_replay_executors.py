"""The sweep, ``replay --split auto`` and ``--vary`` on the executors: one task per (policy, rate)
point, per split and per knob value; the same answer from this process, a local pool and Ray.

The Ray tests run on a local instance started here (``ray.init(num_cpus=2)``) and skip with a
reason only when Ray is not installed (``pip install 'asaptrace[ray]'``). The replay's cost fit is
read from a saved file, so every run replays on the same constants (a fresh fit may differ in
the last bits from run to run: polars sums in parallel).
"""

from __future__ import annotations

import importlib.util
import json
import logging

import pytest

from asaptrace.errors import UsageError
from asaptrace.executors import make_executor, map_ordered, resolve_executor, session
from asaptrace.pipeline import replay_store, sweep
from tests._cli import run_cli
from tests._replay_helpers import sample_store

needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="ray is not installed (pip install 'asaptrace[ray]')"
)

#: a sweep small enough for a test: two policies, three rates bracketing their SLO rates, 40 simulated s
SWEEP = {
    "policies": ("default", "asap"),
    "rates": (1.0, 4.0, 16.0),
    "knobs": {"duration_s": 40},
    "vary": ["k_s=1,2"],
}
REPLAY = {"split": "auto", "vary": ["k_s=1,2", "phi=0,0.2"]}


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'asaptrace[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def store_and_costs(tmp_path_factory):
    root = tmp_path_factory.mktemp("replay-executors")
    store = sample_store("coupled", root)
    costs = root / "costs.toml"
    assert run_cli("replay", store.path, "--policy", "asap", "--save-costs", costs).code == 0
    return store.path, costs


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "local.json"
    sweep(**SWEEP, jobs=1, out=out)
    return out.read_bytes()


def _replay_json(path, costs, **how) -> dict:
    j = replay_store(path, "asap", costs=costs, **REPLAY, **how).to_json()
    j.pop("seconds")  # wall time, the one thing an executor may change
    return j


def test_map_ordered_returns_the_items_order_whatever_finishes_first():
    # the process pool yields results as they finish; the sleeps make the last item finish first
    with session(make_executor("process", jobs=2)) as pool:
        assert map_ordered(pool, _slow_square, [3, 2, 1, 0]) == [9, 4, 1, 0]


def _slow_square(x: int) -> int:
    import time

    time.sleep(0.05 * x)
    return x * x


@needs_ray
def test_sweep_on_ray_writes_the_local_sweeps_json_byte_for_byte(local_ray, local_sweep, tmp_path):
    sweep(**SWEEP, executor="ray", out=tmp_path / "ray.json")
    assert (tmp_path / "ray.json").read_bytes() == local_sweep
    points = json.loads(local_sweep)["curves"]["asap"]
    assert {p["kind"] for p in points} >= {"grid", "bisection"}  # the search ran, not only a grid


@needs_ray
def test_sweep_cli_with_executor_ray_equals_the_local_run(local_ray, local_sweep, tmp_path):
    out = tmp_path / "cli.json"
    args = ["--policies", "default,asap", "--rates", "1,4,16", "--duration", "40s", "--vary", "k_s=1,2"]
    res = run_cli("sweep", *args, "--executor", "ray", "-o", out, "--json")
    assert res.code == 0, res.stderr
    assert out.read_bytes() == local_sweep


@needs_ray
def test_split_auto_and_vary_on_ray_equal_the_local_replay(local_ray, store_and_costs):
    path, costs = store_and_costs
    here = _replay_json(path, costs)
    on_ray = _replay_json(path, costs, executor="ray")
    assert len(here["splits"]) >= 4 and len(here["vary"]) == 4  # 7 splits of 32 devices, 2 × 2 values
    assert on_ray == here


def test_split_auto_and_vary_on_a_local_pool_equal_this_process(store_and_costs):
    path, costs = store_and_costs
    assert _replay_json(path, costs, jobs=2) == _replay_json(path, costs, jobs=1)


def test_executor_mistakes_are_one_line_user_errors(store_and_costs):
    path, _ = store_and_costs
    res = run_cli("sweep", "--executor", "dask", "--rates", "1", "--duration", "5s")
    assert (
        res.code == 2 and "unknown executor 'dask' (known: local, process, ray, serial, thread)" in res.stderr
    )
    assert len(res.stderr.strip().splitlines()) == 1
    for cmd in (["sweep", "--rates", "1"], ["replay", path, "--split", "auto"]):
        res = run_cli(*cmd, "--ray-address", "auto")
        assert res.code == 2 and "needs --executor ray" in res.stderr
    with pytest.raises(UsageError, match="only used by the ray executor"):
        resolve_executor("local", address="auto")


def test_a_task_pool_of_one_runs_each_task_as_it_is_submitted_and_keeps_its_error():
    """``TaskPool(1)`` (and ``0`` capped at one) is this process: a task has run when it is
    submitted, and a user's error comes back from ``result()`` as itself, as a worker's would."""
    from asaptrace.errors import UsageError
    from asaptrace.executors import TaskPool

    ran: list[int] = []
    with TaskPool(0, at_most=1) as pool:
        assert pool.inline
        done = pool.submit(lambda x: ran.append(x) or x * 2, 21)
        assert ran == [21] and done.result() == 42

        def bad() -> None:
            raise UsageError("no such store", path="x.store")

        failed = pool.submit(bad)
    with pytest.raises(UsageError, match=r"x\.store: no such store"):
        failed.result()
    with pytest.raises(UsageError):
        TaskPool(-1)
