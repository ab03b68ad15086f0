"""Coverage-guided fuzzing of the readers with atheris: ``python -m tests.fuzz --seconds 600``.

Options: ``--seconds N`` (total, split evenly over the targets), ``--target NAME`` (one of kineto,
kineto-py, ascend, ascend-csv, nsys; repeatable; default all), ``--corpus DIR`` (where each target's
growing corpus and any crashing input are kept; default ``.fuzz-corpus/``). Each target runs in its
own process (libFuzzer owns the process), seeded from ``../shared/data``; the mutator mixes the
structured mutations of :mod:`tests.fuzz.harness` with libFuzzer's byte mutations. A crash (any
exception other than the project's errors) stops that target, writes ``crash-*`` into its corpus
folder and makes the exit status non-zero.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path


def _child(target_name: str, corpus: Path, seconds: int) -> None:
    import atheris

    with atheris.instrument_imports(include=["asaptrace"]):
        from tests.fuzz import harness

    seeds = harness.seeds()
    target = harness.targets(seeds)[target_name]
    corpus.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(seeds[target_name]):
        (corpus / f"seed-{i}").write_bytes(s)
    work = Path(tempfile.mkdtemp(prefix="asaptrace-fuzz-"))

    def test_one(data: bytes) -> None:
        harness.run_target(target, data, work / "in")

    def mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < 0.5:
            return harness.mutate(data, rng)[:max_size]
        return atheris.Mutate(data, max_size)

    argv = [
        sys.argv[0],
        str(corpus),
        f"-max_total_time={seconds}",
        f"-artifact_prefix={corpus}/",
        "-max_len=2000000",
        "-rss_limit_mb=4096",
        "-timeout=20",
        "-print_final_stats=1",
    ]
    atheris.Setup(argv, test_one, custom_mutator=mutator)
    atheris.Fuzz()


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--target", action="append", default=None)
    ap.add_argument("--corpus", type=Path, default=Path(".fuzz-corpus"))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.corpus / args.child, args.seconds)
        return 0
    names = args.target or ["kineto", "kineto-py", "ascend", "ascend-csv", "nsys"]
    per = max(args.seconds // len(names), 1)
    status = 0
    for name in names:
        print(f"== {name}: {per} s", flush=True)
        cmd = [
            sys.executable,
            "-m",
            "tests.fuzz",
            "--child",
            name,
            "--seconds",
            str(per),
            "--corpus",
            str(args.corpus),
        ]
        status |= subprocess.call(cmd)
    return status


if __name__ == "__main__":
    sys.exit(main())
