"""The bundled sample traces: regenerated bit-for-bit from their seeds, and they ingest into 32-rank stores."""

from __future__ import annotations

import gzip
import hashlib
import re
from pathlib import Path

import pytest

from asaptrace.ingest.driver import ingest_paths
from asaptrace.synth import load_config, synthesize
from tests._synth_helpers import SAMPLES

PRESETS = ["coupled", "disaggregated", "coupled-ascend", "coupled-hot-expert"]
SIZE_BUDGET = 25 * 1024 * 1024


def _content_digest(path: Path) -> str:
    """sha256 of a file's content (decompressed when gzipped: the gzip framing is deterministic here,
    but the check should not hinge on the zlib build)."""
    data = path.read_bytes()
    return hashlib.sha256(gzip.decompress(data) if path.suffix == ".gz" else data).hexdigest()


def _trace_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != "README.md")


def _command(sample: Path) -> str:
    m = re.search(r"`(asaptrace synth [^`]+)`", (sample / "README.md").read_text())
    assert m, f"{sample}/README.md has no regeneration command"
    return m.group(1)


@pytest.mark.parametrize("preset", PRESETS)
def test_sample_regenerates_bit_for_bit_from_its_readme_command(preset, tmp_path):
    sample = SAMPLES / preset
    assert _command(sample) == f"asaptrace synth --preset {preset} -o sample_traces/{preset}"
    synthesize(load_config(preset), tmp_path / preset)
    committed = _trace_files(sample)
    fresh = _trace_files(tmp_path / preset)
    assert [p.relative_to(sample) for p in committed] == [p.relative_to(tmp_path / preset) for p in fresh]
    for a, b in zip(committed, fresh, strict=True):
        assert a.read_bytes() == b.read_bytes() or _content_digest(a) == _content_digest(b), a


def test_samples_fit_the_size_budget_and_are_gzipped():
    files = [p for p in SAMPLES.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= SIZE_BUDGET
    traces = [p for p in files if "trace" in p.name and p.suffix in (".gz", ".json")]
    assert traces and all(p.suffix == ".gz" for p in traces)
    index = (SAMPLES / "README.md").read_text()
    for preset in PRESETS:
        assert f"asaptrace synth --preset {preset} -o sample_traces/{preset}" in index


@pytest.mark.parametrize(
    ("preset", "pattern"),
    [
        ("coupled", "kineto/*.json.gz"),
        ("disaggregated", "kineto/*.json.gz"),
        ("coupled-ascend", "ascend/*_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json.gz"),
        ("coupled-hot-expert", "kineto/*.json.gz"),
    ],
)
def test_sample_ingests_into_a_store_with_ranks_0_to_31(preset, pattern, tmp_path):
    files = sorted((SAMPLES / preset).glob(pattern))
    assert len(files) == 32
    store = ingest_paths(files, tmp_path / "store", jobs=2)
    ranks = store.read("ranks")
    assert sorted(ranks["rank"].to_list()) == list(range(32))
    assert set(ranks["format"].to_list()) == {"ascend" if "ascend" in preset else "kineto"}
    acc = store.meta["accounting"]
    assert acc["read"] == acc["kept"] + sum(acc["rejected"].values())
    assert acc["rejected"] == {}  # the writer emits nothing the ingester has to refuse
