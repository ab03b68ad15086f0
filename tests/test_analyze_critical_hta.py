"""The critical path against HTA's on the same traces, and across ranks on the coupled sample.

HTA's own test traces (``../shared/data/traces/kineto-hta-samples``) are walked by both: HTA's
``critical_path_analysis`` (run in its own process by tests/_hta_critical.py) and ours; the kernels
and copies on the path are the same (by correlation id) and the lengths agree within 1 %.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from asaptrace.analyze.barrier import barrier_wait
from asaptrace.analyze.critical import critical_path
from asaptrace.ingest.driver import ingest_paths

pytest.importorskip("hta", reason="HTA (holistictraceanalysis) is in the test extras")
HERE = Path(__file__).resolve().parent


def _hta(trace_dir: Path, annotation: str, instance: int) -> dict:
    proc = subprocess.run(
        [sys.executable, str(HERE / "_hta_critical.py"), str(trace_dir), annotation, str(instance)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        pytest.skip(f"HTA could not walk {trace_dir.name}: {proc.stderr.strip().splitlines()[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("trace", ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"])
def test_path_equals_htas(shared_data, tmp_path, trace):
    src = shared_data / "traces" / "kineto-hta-samples" / trace
    folder = tmp_path / "trace"
    folder.mkdir()
    shutil.copy(src, folder / trace)  # HTA reads a folder: this file alone
    store = ingest_paths([folder], tmp_path / "s", jobs=1)
    ours = critical_path(store.events(), store.ranks(), annotation="ProfilerStep")
    hta = _hta(folder, "ProfilerStep", 0)
    assert hta["ok"]
    # HTA's times are µs on these traces (kernel durations below say so too); ours ns
    length = ours.steps.filter(pl.col("window") == 0).get_column("length_ns")[0]
    assert length == pytest.approx(hta["length"] * 1000, rel=0.01)
    device = (
        store.events()
        .filter(pl.col("is_device"))
        .select("rank", pl.col("name").cast(pl.String), pl.col("ts_ns").alias("start_ns"), "corr", "dur_ns")
    )
    mine = (
        ours.path.filter((pl.col("window") == 0) & pl.col("kind").is_in(["compute", "copy", "transfer"]))
        .join(device.collect(), on=["rank", "name", "start_ns"], how="left")
        .select("name", "corr", "dur_ns")
    )
    assert sorted(zip(mine["name"], mine["corr"], strict=True)) == sorted(
        (n, c) for n, c, _ in hta["kernels"]
    )
    assert sorted(mine["dur_ns"].to_list()) == sorted(round(d * 1000) for *_, d in hta["kernels"])
    assert mine.height > 0  # the path runs through the device, not only the host


def test_coupled_path_hops_to_the_last_arriving_group(sample_run):
    _truth, store, _diag = sample_run("coupled")
    events, ranks = store.events(), store.ranks()
    cp = critical_path(events, ranks, top=0)
    bw = barrier_wait(events, ranks)
    groups = dict(ranks.select("rank", "dp_group").collect().rows())
    # every hop: the path enters the instance released at start_ns from a rank of the DP group
    # that analyze says was ready last there
    hops = cp.path.filter(pl.col("kind") == "barrier").join(cp.steps.select("window"), on="window")
    assert hops.height >= 1
    last = bw.select("step", "release_ns", "last_dp_group").unique()
    joined = hops.join(last, left_on=["window", "start_ns"], right_on=["step", "release_ns"], how="left")
    assert joined.get_column("last_dp_group").null_count() == 0
    got = [groups[r] for r in joined.get_column("rank").to_list()]
    assert got == joined.get_column("last_dp_group").to_list()
    # the barrier wait of the others is never on the path
    assert cp.steps.get_column("barrier_ns").sum() == 0
    assert (
        cp.steps.get_column("hops").to_list()
        == cp.path.filter(pl.col("kind") == "barrier")
        .group_by("window")
        .len()
        .sort("window")
        .get_column("len")
        .to_list()
    )
