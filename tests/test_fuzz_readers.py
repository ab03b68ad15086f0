"""A bounded fuzz pass over the Kineto, Ascend and nsys readers (the long run: docs/fuzzing.md).

Inputs grow from seeds cut out of the real traces in ``../shared/data`` by structured mutations
(truncation, byte flips, deleted / duplicated keys, wrong types, huge numbers, deep nesting,
non-UTF-8 bytes, gzip) chosen by hypothesis. Every input must be read (with balanced accounting)
or refused with one of the project's errors; any other exception fails the test. The pass is
derandomised, so CI sees the same inputs every run; about 40 s in all.
"""

from __future__ import annotations

import gzip
import importlib.util
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz import harness

REGRESSIONS = Path(__file__).parent / "fuzz" / "regressions"
#: examples per target, sized so the whole file stays well under a minute on a shared 2-core box
EXAMPLES = {"kineto": 400, "kineto-py": 250, "ascend": 150, "ascend-csv": 150, "nsys": 60}


@pytest.fixture(scope="module")
def corpus(shared_data):
    got = harness.seeds()
    return got, harness.targets(got)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_mutated_inputs_are_read_or_refused_with_a_project_error(corpus, tmp_path_factory, name):
    seeds, targets = corpus
    if not seeds[name]:
        pytest.skip(f"no seed for {name} in ../shared/data")
    target, work = targets[name], tmp_path_factory.mktemp(name)

    @settings(
        max_examples=EXAMPLES[name],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(seed=st.sampled_from(seeds[name]), rounds=st.integers(1, 3), rng_seed=st.integers(0, 2**32 - 1))
    def check(seed: bytes, rounds: int, rng_seed: int) -> None:
        rng, data = random.Random(rng_seed), seed
        for _ in range(rounds):
            data = harness.mutate(data, rng)
        harness.run_target(target, data, work / "in")  # raises anything but an AsaptraceError

    check()


def test_every_seed_reads(corpus, tmp_path):
    # the unmutated seeds are valid traces: they must be read, not refused
    seeds, targets = corpus
    for name, target in targets.items():
        for s in seeds[name]:
            assert harness.run_target(target, s, tmp_path / "in") == "read", name


def test_damaged_sqlite_whose_error_text_does_not_decode_is_a_corrupt_trace(tmp_path):
    # found by the fuzzer: sqlite's error message about a damaged schema held invalid UTF-8, and
    # decoding it raised UnicodeDecodeError out of the nsys reader
    data = gzip.decompress((REGRESSIONS / "nsys-undecodable-error.sqlite.gz").read_bytes())
    targets = harness.targets({"ascend": [], "ascend-csv": []})
    assert harness.run_target(targets["nsys"], data, tmp_path / "in") == "rejected:CorruptTrace"


@pytest.mark.skipif(importlib.util.find_spec("atheris") is None, reason="atheris is not installed")
def test_coverage_guided_run_finds_no_crash(shared_data, tmp_path):
    # a few seconds of the real fuzzer (libFuzzer via atheris) on the Kineto reader, in a child
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.fuzz",
            "--seconds",
            "8",
            "--target",
            "kineto",
            "--corpus",
            str(tmp_path),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "Done" in run.stderr and not list((tmp_path / "kineto").glob("crash-*"))


def test_kernel_details_whose_header_names_collide_once_trimmed(corpus, tmp_path):
    # found by the fuzzer: header "Step Id,MGD,mN ,I\0aDe, ,I\0aDe," has two names that trim to "",
    # and renaming both raised polars' DuplicateError; now it is a CSV lacking required columns
    _, targets = corpus
    if "ascend-csv" not in targets:
        pytest.skip("no Ascend seed in ../shared/data")
    data = (REGRESSIONS / "ascend-kernel-details-duplicate-trimmed-header.csv").read_bytes()
    assert harness.run_target(targets["ascend-csv"], data, tmp_path / "in") == "rejected:CorruptTrace"
