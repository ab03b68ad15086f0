"""The diagnosis kept beside a store: read back whole, never stale, never a store file.

A store diagnosed once is read back (no analysis runs) and gives the same tables, findings, notes
and meta; a change to the store's files, its meta.json or asaptrace's code diagnoses it again; the
store's own files, format and fingerprint are unchanged by it; a damaged cache or a store that cannot
be written costs only the time."""

from __future__ import annotations

import json
import shutil

import pytest
from polars.testing import assert_frame_equal

from asaptrace import pipeline
from asaptrace.analyze import diagnosis as analysis
from asaptrace.pipeline import cache
from asaptrace.schema import STORE_FINGERPRINTS, STORE_FORMAT_VERSION, store_fingerprint


@pytest.fixture
def store(coupled_store, tmp_path):
    """A copy of the coupled sample's store (the session's is shared: this one gets a cache)."""
    shutil.copytree(coupled_store.path, tmp_path / "s.store")
    (tmp_path / "s.store" / cache.CACHE_NAME).unlink(missing_ok=True)  # never diagnosed
    return pipeline.open_store(tmp_path / "s.store")


@pytest.fixture
def runs(monkeypatch):
    """How many times the analyses ran."""
    calls = []
    real = analysis.diagnose

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(analysis, "diagnose", counted)
    return calls


def _same(a, b) -> None:
    assert list(a.tables) == list(b.tables)
    for name in a.tables:
        assert_frame_equal(a.tables[name], b.tables[name])
    assert a.findings == b.findings and a.notes == b.notes and a.meta == b.meta


def test_a_store_diagnosed_once_is_read_back_whole(store, coupled_diagnosis, runs):
    first = pipeline.diagnose_store(store)
    assert (store.path / cache.CACHE_NAME).is_file() and len(runs) == 1
    again = pipeline.diagnose_store(pipeline.open_store(store.path))
    assert len(runs) == 1  # read, not diagnosed
    _same(again, first)
    # what the session's store (never cached) gives, but for where the store is
    assert again.meta["store"] == str(store.path)
    _same(
        again,
        type(coupled_diagnosis)(
            tables=coupled_diagnosis.tables,
            findings=coupled_diagnosis.findings,
            notes=coupled_diagnosis.notes,
            meta={**coupled_diagnosis.meta, "store": str(store.path)},
        ),
    )


def test_what_the_store_holds_is_kept_with_it(store, monkeypatch):
    from asaptrace import info

    described = info.store_info(store)
    assert pipeline.store_info(store) == described  # not diagnosed yet: worked out
    pipeline.diagnose_store(store)

    def refuse(_store):
        raise AssertionError("the store was scanned again")

    monkeypatch.setattr(info, "store_info", refuse)
    assert pipeline.store_info(pipeline.open_store(store.path)) == described


def test_a_moved_store_reads_its_diagnosis_and_names_its_new_place(store, tmp_path, runs):
    pipeline.diagnose_store(store)
    moved = tmp_path / "moved.store"
    store.path.rename(moved)  # a rename keeps every file's size and time
    diag = pipeline.diagnose_store(pipeline.open_store(moved))
    assert len(runs) == 1 and diag.meta["store"] == str(moved)
    assert pipeline.store_info(pipeline.open_store(moved))["store"] == str(moved)


@pytest.mark.parametrize("change", ["file", "meta", "code"])
def test_it_is_never_stale(store, runs, monkeypatch, change):
    pipeline.diagnose_store(store)
    if change == "file":  # a part rewritten in place: same rows, another time
        part = store.path / next(rel for rel in store.meta["files"] if rel.startswith("events/"))
        part.write_bytes(part.read_bytes())
        st = part.stat()
        import os

        os.utime(part, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    elif change == "meta":  # meta.json says something else (e.g. another parallel layout)
        meta = json.loads((store.path / "meta.json").read_text())
        meta["parallel"] = {**(meta.get("parallel") or {}), "source": "given"}
        (store.path / "meta.json").write_text(json.dumps(meta, indent=2))
    else:  # another asaptrace (or an edit of this one)
        monkeypatch.setattr(cache, "code_hash", lambda: "another version")
    pipeline.diagnose_store(pipeline.open_store(store.path))
    assert len(runs) == 2  # diagnosed again
    pipeline.diagnose_store(pipeline.open_store(store.path))
    assert len(runs) == 2  # and the new diagnosis kept


def test_options_are_diagnosed_in_memory_never_cached(store, runs):
    pipeline.diagnose_store(store, parallel="dp=8,tp=4,ep=32")
    assert not (store.path / cache.CACHE_NAME).exists()
    pipeline.diagnose_store(store)
    pipeline.diagnose_store(store, parallel="dp=8,tp=4,ep=32")
    assert len(runs) == 3  # the cached diagnosis is the store's own enrichment's only


def test_the_store_is_unchanged_by_it(store):
    before = {p.relative_to(store.path): p.read_bytes() for p in store.path.rglob("*") if p.is_file()}
    pipeline.diagnose_store(store)
    after = {p.relative_to(store.path): p.read_bytes() for p in store.path.rglob("*") if p.is_file()}
    assert set(after) - set(before) == {cache.Path(cache.CACHE_NAME)}
    assert all(after[k] == v for k, v in before.items())
    # it opens as before (no unlisted file), its info lists no new file, the format is the same
    reopened = pipeline.open_store(store.path)
    assert pipeline.store_info(reopened) == pipeline.store_info(store)
    assert store_fingerprint() == STORE_FINGERPRINTS[STORE_FORMAT_VERSION]


def test_a_damaged_cache_is_diagnosed_again_and_replaced(store, runs):
    good = pipeline.diagnose_store(store)
    (store.path / cache.CACHE_NAME).write_bytes(b"PK\x03\x04 not a zip")
    _same(pipeline.diagnose_store(store), good)
    assert len(runs) == 2
    pipeline.diagnose_store(store)
    assert len(runs) == 2


def test_a_store_that_cannot_be_written_is_diagnosed_each_time(store, runs, monkeypatch):
    def refuse(*a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(cache.os, "replace", refuse)  # root ignores chmod: refuse the rename
    first = pipeline.diagnose_store(store)
    second = pipeline.diagnose_store(store)
    assert len(runs) == 2 and not (store.path / cache.CACHE_NAME).exists()
    assert [p.name for p in store.path.iterdir() if p.name.startswith(".")] == []  # no temporary left
    _same(first, second)
