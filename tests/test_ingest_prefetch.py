"""Files read ahead while the CLI imports: used only for the same file, and the same store either way.

``asaptrace ingest`` starts :mod:`asaptrace.ingest.kineto.prefetch` before its heavy imports; the reader
takes a file's bytes and scan from it, the driver its sha256. A file that changed since it was
read ahead, that the prefetch could not read, or that is not Kineto is read by the ingest itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from asaptrace.ingest.kineto import prefetch
from asaptrace.pipeline import build_store
from tests._analysis_helpers import moe_scenario, write_traces
from tests.conftest import SAMPLES


@pytest.fixture(autouse=True)
def _nothing_left_ahead():
    prefetch.clear()
    yield
    prefetch.clear()


def _taken(monkeypatch) -> list[str]:
    """The files the reader took from the read-ahead."""
    got: list[str] = []
    real = prefetch.take

    def take(path):
        e = real(path)
        if e is not None:
            got.append(Path(path).name)
        return e

    monkeypatch.setattr(prefetch, "take", take)
    return got


def _same(a, b) -> None:
    assert list(a.meta["files"]) == list(b.meta["files"])
    for rel in a.meta["files"]:
        assert pq.read_table(a.path / rel).equals(pq.read_table(b.path / rel)), rel
    assert a.meta["sources"] == b.meta["sources"]  # sizes and sha256 too


@pytest.mark.parametrize("kind", ["json", "gzip"])
def test_files_read_ahead_build_the_store_a_plain_read_builds(kind, tmp_path, monkeypatch):
    # the samples are .pt.trace.json.gz
    src = SAMPLES / "coupled" / "kineto" if kind == "gzip" else write_traces(tmp_path / "t", moe_scenario())
    plain = build_store([src], tmp_path / "plain", jobs=2)
    taken = _taken(monkeypatch)
    assert prefetch.start([src], max_bytes=1 << 30) > 0
    ahead = build_store([src], tmp_path / "ahead", jobs=2)
    assert taken  # the reader did use what was read ahead
    _same(plain, ahead)
    assert not any(p.suffix == ".arrow" or ".spill" in p.parts for p in ahead.path.rglob("*"))


def test_a_file_changed_after_it_was_read_ahead_is_read_again(tmp_path, monkeypatch):
    src = write_traces(tmp_path / "t", moe_scenario())
    files = sorted(src.glob("*.json"))
    assert prefetch.start(files[:1], max_bytes=1 << 30) == 1
    prefetch.digest(files[0])  # wait until it is read ahead
    doc = json.loads(files[0].read_text())
    doc["traceEvents"] = doc["traceEvents"][:-1]  # one event less
    files[0].write_text(json.dumps(doc))
    os.utime(files[0], ns=(1, 1))
    taken = _taken(monkeypatch)
    store = build_store(files, tmp_path / "s", jobs=1)
    assert taken == []
    again = build_store(files, tmp_path / "again", jobs=1)  # nothing read ahead
    _same(store, again)


def test_a_file_over_the_size_cap_is_refused_as_without_the_read_ahead(tmp_path):
    from asaptrace.errors import SizeLimitExceeded
    from asaptrace.ingest.base import IngestOptions

    src = write_traces(tmp_path / "t", moe_scenario())
    prefetch.start([src], max_bytes=1 << 30)  # read ahead under a larger cap than the ingest's
    with pytest.raises(SizeLimitExceeded):
        build_store([src], tmp_path / "s", jobs=1, options=IngestOptions(max_decompressed_bytes=1000))


def test_the_read_ahead_and_the_cli_import_no_numpy_pyarrow_nor_polars(tmp_path):
    # what makes the read-ahead worth it: it runs before the heavy imports, and so does the CLI
    src = write_traces(tmp_path / "t", moe_scenario())
    code = (
        "import sys, json\n"
        "import asaptrace.cli.app\n"
        "from asaptrace.ingest.kineto import prefetch\n"
        f"n = prefetch.start([{str(src)!r}], max_bytes=1 << 30)\n"
        "prefetch.digest(sorted(__import__('pathlib').Path(sys.argv[1]).glob('*.json'))[0])\n"
        "print(json.dumps([n, sorted(m for m in ('numpy', 'pyarrow', 'polars') if m in sys.modules)]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    n, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    assert n > 0 and heavy == []
