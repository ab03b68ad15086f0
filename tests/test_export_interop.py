"""Other tools read what asaptrace writes.

* HolisticTraceAnalysis (HTA, Meta's Kineto reader; in the ``test`` extra) loads ``export --per-rank``
  of a measured and of a replayed store: one rank per file, read from ``distributedInfo``; every
  kernel a GPU kernel (a stream and a correlation), per rank as many as the store holds; the
  measured store's kernels linked to their CPU launches; the wait slices there. HTA runs in its own
  process (tests/_hta_probe.py says why).
* The same HTA on the sample's original traces counts the same kernels per rank as on our export of
  its store: a check that needs nothing of ours to be right.
* duckdb and pandas read the store's Parquet tables directly: events and device time by kind equal
  what ``asaptrace info`` reports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pytest

from asaptrace import pipeline
from asaptrace.schema import Kind
from asaptrace.store import TraceStore
from tests._cli import run_cli

PROBE = Path(__file__).with_name("_hta_probe.py")
SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "coupled" / "kineto"


def hta(folder: Path) -> dict[int, dict]:
    """HTA's view of a folder of traces (per rank), failing on a parse error or a rank it had to guess."""
    proc = subprocess.run([sys.executable, str(PROBE), str(folder)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "does not have the rank specified" not in proc.stderr  # HTA's "default to rank 0" warning
    assert "has the same rank" not in proc.stderr
    return {int(r): v for r, v in json.loads(proc.stdout).items()}


@pytest.fixture(scope="module")
def stores(coupled_store, tmp_path_factory):
    """The coupled sample as measured, and replayed under asap (no host events, no correlations)."""
    tmp = tmp_path_factory.mktemp("interop")
    pipeline.replay_store(coupled_store.path, "asap", out=tmp / "asap.store")
    return {"measured": coupled_store, "replayed": TraceStore.open(tmp / "asap.store")}


def _per_rank_kernels(store: TraceStore) -> pl.DataFrame:
    """Per rank: device spans that are not annotations (kernels, copies), and their streams."""
    return (
        store.events()
        .filter(pl.col("is_device") & (pl.col("kind") != str(Kind.ANNOTATION)))
        .group_by(pl.col("rank").cast(pl.Int64))
        .agg(pl.len().alias("kernels"), pl.col("stream").unique().sort().alias("streams"))
        .sort("rank")
        .collect()
    )


def _waits_per_rank(store: TraceStore) -> dict[int, int]:
    """Waits the export draws as slices: barrier waits and, disaggregated, receive waits (> 0)."""
    t = pipeline.diagnose_store(store).tables
    waits = pl.concat(
        [t["barrier_instances"].select("rank", "wait_ns"), t["receive_waits"].select("rank", "wait_ns")]
    )
    return dict(waits.filter(pl.col("wait_ns") > 0).group_by("rank").len().iter_rows())


@pytest.fixture(scope="module")
def exported(stores, tmp_path_factory):
    """``which -> (folder of the per-rank export, HTA's view of it)``, exported once per store."""
    cache: dict[str, tuple[Path, dict[int, dict]]] = {}

    def get(which: str):
        if which not in cache:
            folder = tmp_path_factory.mktemp(which) / "ranks"
            r = run_cli("export", stores[which].path, "--per-rank", "-o", folder)
            assert r.code == 0, r.stderr
            cache[which] = (folder, hta(folder))
        return cache[which]

    return get


@pytest.mark.parametrize("which", ["measured", "replayed"])
def test_hta_reads_the_per_rank_export(stores, exported, which):
    store = stores[which]
    _, got = exported(which)
    want = _per_rank_kernels(store)
    ranks = want.get_column("rank").to_list()
    assert len(ranks) == 32 and sorted(got) == ranks  # every rank, none folded onto rank 0
    assert all(Path(got[r]["file"]).name == f"rank{r:05d}.json.gz" for r in ranks)
    for rank, kernels, streams in want.iter_rows():
        assert (got[rank]["kernels"], got[rank]["streams"]) == (kernels, streams), rank
    if which == "measured":  # every kernel of the store has its launch: HTA links each one
        assert all(got[r]["launched"] == got[r]["kernels"] > 0 for r in ranks)
    else:  # a replay has no host side: correlations exist (HTA needs them) but link to nothing
        assert all(got[r]["launched"] == 0 for r in ranks)
    waits = _waits_per_rank(store)
    assert sum(waits.values()) > 0
    assert {r: v["waits"] for r, v in got.items() if v["waits"]} == waits


def test_hta_counts_the_same_kernels_in_the_export_as_in_the_original_traces(exported, tmp_path):
    # four ranks of the original traces (HTA takes ≈ 1 s a file on them): DP groups 0, 2, 5, 7
    ranks = (0, 9, 22, 31)
    for r in ranks:
        (tmp_path / f"rank{r:03d}.pt.trace.json.gz").symlink_to(SAMPLE / f"rank{r:03d}.pt.trace.json.gz")
    original = hta(tmp_path)
    _, exported_view = exported("measured")
    assert sorted(original) == list(ranks)
    for r in ranks:
        assert original[r]["kernels"] > 0
        for key in ("kernels", "streams", "launched"):
            assert exported_view[r][key] == original[r][key], (r, key)


def _info_by_kind(store: TraceStore) -> tuple[dict, dict]:
    r = run_cli("info", store.path, "--json")
    assert r.code == 0, r.stderr
    info = json.loads(r.stdout)
    return info["events_by_kind"], info["device_time_by_kind_ns"]


@pytest.mark.parametrize("which", ["measured", "replayed"])
def test_duckdb_and_pandas_read_the_store_tables(stores, which):
    store = stores[which]
    events_by_kind, time_by_kind = _info_by_kind(store)
    parts = str(store.path / "events" / "*.parquet")
    rows = duckdb.sql(
        f"SELECT kind::VARCHAR, count(*), coalesce(sum(dur_ns) FILTER (WHERE is_device), 0) "
        f"FROM read_parquet('{parts}') GROUP BY kind"
    ).fetchall()
    assert {k: n for k, n, _ in rows} == events_by_kind
    # annotations are listed apart from device time (info's annotation_time_ns): labels, not work
    assert {k: int(t) for k, _, t in rows if k != "annotation"} == time_by_kind
    assert sum(events_by_kind.values()) > 0 and sum(time_by_kind.values()) > 0

    df = pd.read_parquet(store.path / "events")
    df["kind"] = df["kind"].astype(str)
    assert df.groupby("kind").size().to_dict() == events_by_kind
    device = df[df["is_device"]].groupby("kind")["dur_ns"].sum()
    assert {k: int(device.get(k, 0)) for k in events_by_kind if k != "annotation"} == time_by_kind
