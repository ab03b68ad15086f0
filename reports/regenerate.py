"""Regenerate the sample reports in reports/ from sample_traces/ (run: python reports/regenerate.py).

Each sample is ingested into a temporary store, diagnosed and reported as HTML and Markdown; the
coupled sample's reports also carry a Replay section (the sample replayed under ASAP). The
output is deterministic (fixed figure ids, no clock read, source paths relative to the repository),
so tests/test_report_samples.py regenerates into a temporary folder and compares byte for byte.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from asaptrace.pipeline import build_store, replay_store, report_store  # noqa: E402

#: Sample name → its trace folder (relative to the repository).
SAMPLES = {
    "coupled": "sample_traces/coupled/kineto",
    "coupled-hot-expert": "sample_traces/coupled-hot-expert/kineto",
    "disaggregated": "sample_traces/disaggregated/kineto",
}
#: Samples whose reports carry a Replay section: sample → the policy replayed.
REPLAYED = {"coupled": "asap"}


def regenerate(out_dir: Path, *, names: list[str] | None = None, jobs: int | None = None) -> list[Path]:
    """Write ``<name>.html`` and ``<name>.md`` for each sample into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="asaptrace-reports-") as tmp:
        for name in names or list(SAMPLES):
            traces = SAMPLES[name]
            store = build_store([ROOT / traces], Path(tmp) / f"{name}.store", jobs=jobs)
            replays, replay_cmd, replay_opt = [], "", ""
            if name in REPLAYED:
                policy = REPLAYED[name]
                replays = [Path(tmp) / f"{name}-{policy}.store"]
                replay_store(store.path, policy, out=replays[0])
                replay_cmd = f"asaptrace replay {name}.store --policy {policy} -o {replays[0].name} && "
                replay_opt = f" --replay {replays[0].name}"
            for fmt in ("html", "md"):
                command = (
                    f"asaptrace ingest {traces} -o {name}.store && {replay_cmd}"
                    f"asaptrace report {name}.store{replay_opt} --format {fmt} -o reports/{name}.{fmt}"
                    "  # run by: python reports/regenerate.py"
                )
                written.append(
                    report_store(
                        store.path,
                        out_dir / f"{name}.{fmt}",
                        command=command,
                        fmt=fmt,  # type: ignore[arg-type]
                        replays=replays,
                        store_label=f"{name}.store",
                        path_root=ROOT,
                    )
                )
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "reports", help="folder to write (default: reports/)"
    )
    parser.add_argument("names", nargs="*", choices=[*SAMPLES, []], help="samples (default: all)")
    args = parser.parse_args()
    for path in regenerate(args.out, names=args.names or None):
        print(f"wrote {path} ({path.stat().st_size / 1024**2:.1f} MiB)")


if __name__ == "__main__":
    main()
