"""TraceStore: atomic writes, refusal to clobber, version checks."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from asaptrace.errors import StoreError, StoreVersionError
from asaptrace.schema import EVENTS_SCHEMA, STORE_FORMAT_VERSION
from asaptrace.store import StoreWriter, TraceStore


def _events(n: int) -> pa.Table:
    cols = {f.name: pa.nulls(n, f.type) for f in EVENTS_SCHEMA}
    cols.update(
        rank=pa.array([0] * n, pa.int32()),
        pid=pa.array([0] * n, pa.int32()),
        stream=pa.array([7] * n, pa.int32()),
        is_device=pa.array([True] * n),
        kind=pa.array(["compute"] * n).dictionary_encode(),
        name=pa.array(["k"] * n).dictionary_encode(),
        ts_ns=pa.array(range(n), pa.int64()),
        dur_ns=pa.array([5] * n, pa.int64()),
        eid=pa.array(range(n), pa.int64()),
    )
    return pa.table(cols)


def test_commit_makes_store_and_leaves_no_temporary(tmp_path):
    with StoreWriter(tmp_path / "s") as w:
        w.write_part("events", "0", _events(3))
        store = w.commit(
            {"accounting": {"read": 3, "kept": 3, "kept_by_table": {"events": 3}, "rejected": {}}}
        )
    assert store.read("events").height == 3
    assert store.meta["format_version"] == STORE_FORMAT_VERSION
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]


def test_error_inside_writer_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError), StoreWriter(tmp_path / "s") as w:
        w.write_part("events", "0", _events(3))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_existing_store_needs_overwrite(tmp_path):
    with StoreWriter(tmp_path / "s") as w:
        w.commit({"accounting": {"read": 0, "kept": 0, "rejected": {}}})
    with pytest.raises(StoreError, match="already exists; pass --force"):
        StoreWriter(tmp_path / "s")
    with StoreWriter(tmp_path / "s", overwrite=True) as w:
        w.write_part("events", "0", _events(2))
        assert w.commit({"accounting": {"read": 2, "kept": 2, "rejected": {}}}).read("events").height == 2


def test_refuses_to_replace_a_directory_that_is_not_a_store(tmp_path):
    precious = tmp_path / "home"
    precious.mkdir()
    (precious / "thesis.tex").write_text("do not delete")
    with pytest.raises(StoreError, match="not an asaptrace store"):
        StoreWriter(precious, overwrite=True)
    assert (precious / "thesis.tex").read_text() == "do not delete"


def test_other_format_version_is_refused(tmp_path):
    with StoreWriter(tmp_path / "s") as w:
        w.commit({"accounting": {"read": 0, "kept": 0, "rejected": {}}})
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    meta["format_version"] = STORE_FORMAT_VERSION + 1
    (tmp_path / "s" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(StoreVersionError, match=r"format version .* not supported .* re-ingest"):
        TraceStore.open(tmp_path / "s")


def test_open_non_store_says_so(tmp_path):
    with pytest.raises(StoreError, match="not an asaptrace store"):
        TraceStore.open(tmp_path)
    with pytest.raises(StoreError, match="no such store"):
        TraceStore.open(tmp_path / "missing")
