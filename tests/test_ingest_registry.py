"""A format declares its own priority, grouping, rank-map name and rank hint; the driver asks the registry.

A toy format registered the way a user extension would be: files ``*.toy`` are plain text, one
event per line (``name start_ns dur_ns``), and a folder ``run-<name>/`` holding several ``.toy``
files is *one* source (like an Ascend rank folder), named by its folder in a rank map. The rank is
read from the folder name's ``node<N>`` (not a pattern the built-in name rules know).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from asaptrace.accounting import Accounting
from asaptrace.ingest.base import (
    FORMATS,
    Format,
    IngestResult,
    RankInfo,
    by_priority,
    detect_format,
    dictionary,
    register_format,
)
from asaptrace.ingest.driver import ingest_paths
from asaptrace.ingest.naming import NameHint
from asaptrace.schema import ARGS_SCHEMA, EVENTS_SCHEMA, FLOWS_SCHEMA, STREAMS_SCHEMA


def _folder(path: Path) -> Path | None:
    return next((p for p in path.parents if p.name.startswith("run-")), None)


def _group(files: list[Path]) -> list[Path]:
    out: dict[Path, None] = {}
    for f in files:
        d = _folder(f) if f.suffix == ".toy" else None
        out[min(d.glob("*.toy")) if d is not None else f] = None  # the folder's first file stands for it
    return list(out)


def _read(path: Path, options) -> IngestResult:
    d = _folder(path)
    files = sorted(d.glob("*.toy")) if d is not None else [path]
    rows = [line.split() for f in files for line in f.read_text().splitlines() if line.strip()]
    n = len(rows)
    events = pa.table(
        {
            "rank": pa.array([-1] * n, pa.int32()),
            "eid": pa.array(range(n), pa.int64()),
            "pid": pa.array([0] * n, pa.int64()),
            "stream": pa.array([0] * n, pa.int64()),
            "is_device": pa.array([True] * n),
            "kind": dictionary(pa.array(["compute"] * n)),
            "name": dictionary(pa.array([r[0] for r in rows])),
            "ts_ns": pa.array([int(r[1]) for r in rows], pa.int64()),
            "dur_ns": pa.array([int(r[2]) for r in rows], pa.int64()),
        }
    )
    events = pa.table(
        {
            f.name: events[f.name] if f.name in events.column_names else pa.nulls(n, f.type)
            for f in EVENTS_SCHEMA
        },
        schema=EVENTS_SCHEMA,
    )
    return IngestResult(
        path=str(path),
        format="toy",
        events=events,
        args=ARGS_SCHEMA.empty_table(),
        flows=FLOWS_SCHEMA.empty_table(),
        streams=STREAMS_SCHEMA.empty_table(),
        accounting=Accounting(read=n, kept=Counter({"events": n})),
        rank_info=RankInfo(),
    )


def _hint(path: Path) -> NameHint | None:
    d = _folder(path)
    m = re.search(r"node(\d+)", d.name) if d is not None else None
    return NameHint(rank=int(m.group(1)), rule="toy-node") if m else None


@pytest.fixture(scope="module")
def toy() -> Format:
    if "toy" not in FORMATS:
        register_format(
            Format(
                name="toy",
                sniff=lambda path, head: path.suffix == ".toy",
                suffixes=(".toy",),
                read=_read,
                priority=100,
                group=_group,
                source_name=lambda path: None if _folder(path) is None else _folder(path).name,
                rank_hint=_hint,
            )
        )
    return FORMATS.get("toy")


def _run(root: Path, node: int, events: list[str]) -> Path:
    d = root / f"run-node{node}"
    d.mkdir(parents=True)
    for i, e in enumerate(events):
        (d / f"part{i}.toy").write_text(e + "\n")
    return d


def test_priority_orders_detection_not_import_order(toy, tmp_path):
    assert by_priority()[0] is toy
    # the built-ins keep their declared order: Ascend before Kineto (a trace_view.json is JSON too)
    names = [f.name for f in by_priority()]
    assert names.index("ascend") < names.index("kineto")
    f = tmp_path / "x.toy"
    f.write_text("gemm 0 10\n")
    assert detect_format(f) is toy


def test_folder_is_one_source_with_its_rank_from_the_format_hint(toy, tmp_path):
    # two folders of two files each: 2 sources, 4 events; ranks 3 and 5 from "node<N>"
    _run(tmp_path / "in", 3, ["gemm 0 10", "attn 20 5"])
    _run(tmp_path / "in", 5, ["gemm 1 10", "attn 21 5"])
    store = ingest_paths([tmp_path / "in"], tmp_path / "s")
    ranks = store.read("ranks").sort("rank")
    assert ranks.get_column("rank").to_list() == [3, 5]
    assert ranks.get_column("rank_source").to_list() == ["filename:toy-node"] * 2
    assert store.meta["accounting"]["kept"] == 4


def test_rank_map_names_the_source_by_the_format_name_for_it(toy, tmp_path):
    _run(tmp_path / "in", 3, ["gemm 0 10"])
    _run(tmp_path / "in", 5, ["gemm 1 10"])
    # the map swaps them, naming each source by its folder (the format's source_name)
    store = ingest_paths([tmp_path / "in"], tmp_path / "s", rank_map={"run-node3": 1, "run-node5": 0})
    ranks = store.read("ranks").sort("rank")
    assert [Path(p).parent.name for p in ranks.get_column("source_file")] == ["run-node5", "run-node3"]
    assert ranks.get_column("rank_source").to_list() == ["map", "map"]
