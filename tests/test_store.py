"""TraceStore: atomic writes, refusal to clobber, version checks."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
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
    with pytest.raises(
        StoreVersionError,
        match=r"store format v\d+; this asaptrace .* reads v\d+ \(upgrade asaptrace, or with `asaptrace ingest",
    ):
        TraceStore.open(tmp_path / "s")


def test_open_non_store_says_so(tmp_path):
    with pytest.raises(StoreError, match="not an asaptrace store"):
        TraceStore.open(tmp_path)
    with pytest.raises(StoreError, match="no such store"):
        TraceStore.open(tmp_path / "missing")


def _sample_store(tmp_path):
    """A committed store of two event parts (3 and 2 rows), as ingest writes them."""
    with StoreWriter(tmp_path / "s") as w:
        w.write_part("events", "00000", _events(3))
        w.write_part("events", "00001", _events(2))
        w.commit({"accounting": {"read": 5, "kept": 5, "rejected": {}}})
    return tmp_path / "s"


def test_meta_lists_every_file_with_its_rows(tmp_path):
    store = TraceStore.open(_sample_store(tmp_path))
    files = store.meta["files"]
    assert files["events/part-00000.parquet"] == 3 and files["events/part-00001.parquet"] == 2
    assert files["ranks.parquet"] == 0 and "meta.json" not in files


def test_deleted_event_part_is_named(tmp_path):
    root = _sample_store(tmp_path)
    (root / "events" / "part-00001.parquet").unlink()
    with pytest.raises(StoreError) as err:
        TraceStore.open(root)
    assert (
        str(err.value)
        == f"{root}/events/part-00001.parquet: missing (2 rows): the store is damaged; re-ingest the traces"
    )


def test_truncated_event_part_is_named(tmp_path):
    root = _sample_store(tmp_path)
    part = root / "events" / "part-00000.parquet"
    part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    with pytest.raises(
        StoreError, match=r"events/part-00000\.parquet: truncated or not Parquet .*damaged"
    ) as err:
        TraceStore.open(root)
    assert "\n" not in str(err.value)


def test_missing_meta_json_of_a_store_is_damage(tmp_path):
    root = _sample_store(tmp_path)
    (root / "meta.json").unlink()
    with pytest.raises(StoreError, match=r"meta\.json: missing: the store is damaged"):
        TraceStore.open(root)


def test_garbage_ranks_parquet_is_named(tmp_path):
    root = _sample_store(tmp_path)
    (root / "ranks.parquet").write_bytes(b"PAR1 this is not a parquet file at all \x00\xff")
    with pytest.raises(StoreError, match=r"ranks\.parquet: truncated or not Parquet .*damaged"):
        TraceStore.open(root)


def test_part_replaced_by_another_of_other_length_is_named(tmp_path):
    # a valid Parquet file with the right columns but not the rows meta.json recorded
    root = _sample_store(tmp_path)
    import pyarrow.parquet as pq

    pq.write_table(_events(7), root / "events" / "part-00001.parquet")
    with pytest.raises(StoreError, match=r"part-00001\.parquet: holds 7 rows, meta\.json says 2"):
        TraceStore.open(root)


def test_foreign_part_is_named(tmp_path):
    root = _sample_store(tmp_path)
    (root / "events" / "part-00009.parquet").write_bytes(
        (root / "events" / "part-00000.parquet").read_bytes()
    )
    with pytest.raises(StoreError, match=r"part-00009\.parquet: not written with this store"):
        TraceStore.open(root)


def test_damage_after_open_is_a_store_error_on_read(tmp_path):
    root = _sample_store(tmp_path)
    store = TraceStore.open(root)
    (root / "events" / "part-00000.parquet").unlink()
    with pytest.raises(StoreError, match=r"events: cannot be read, the store is damaged"):
        store.read("events")


def test_flow_ids_are_stored_plain_and_read_back_as_written(tmp_path):
    """Consistency check of the Parquet settings: a flow id (shared by a flow's two or three
    events only) is stored without a dictionary, the flows' other strings with one, and the ids
    read back as the strings written."""
    from asaptrace.schema import TABLE_SCHEMAS
    from asaptrace.store import write_parquet

    n = 3000
    schema = TABLE_SCHEMAS["flows"]
    cols = {f.name: pa.nulls(n, f.type) for f in schema}
    cols.update(
        rank=pa.array([0] * n, pa.int32()),
        flow_id=pa.array([str(i // 2) for i in range(n)]),
        phase=pa.array(["s", "f"] * (n // 2)),
        pid=pa.array([1] * n, pa.int32()),
        stream=pa.array([2] * n, pa.int32()),
        ts_ns=pa.array(range(n), pa.int64()),
    )
    table = pa.table({f.name: cols[f.name] for f in schema}, schema=schema)
    path = tmp_path / "flows.parquet"
    write_parquet(table, path)
    meta = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert not any("DICTIONARY" in e for e in encodings["flow_id"])
    assert any("DICTIONARY" in e for e in encodings["phase"])
    assert pq.read_table(path).column("flow_id").to_pylist() == table.column("flow_id").to_pylist()
