"""A folder of rank files through the whole CLI, against HTA's ``TraceAnalysis`` on the same folder.

Usage:  python benchmarks/ingest_folder.py [--ranks 8] [--mb-per-rank 40] [--repeat 3] [--workdir DIR] [--no-hta]

The folder is ``--ranks`` Kineto files of ``--mb-per-rank`` MB each, made by the bundled generator
(:mod:`_kineto_gen`, in the style of a real GPU trace: cpu ops with shapes, launches, kernels with
full args, NCCL metadata, flows), one ``distributedInfo.rank`` per file. Rows, each a fresh
process timed from outside (interpreter start-up, imports, reading, enrichment, writes, exit):

- ``asaptrace ingest DIR`` as a user runs it after ``pip install .``: a clean install of this
  checkout with its runtime dependencies only, in benchmarks/.venv-user (made on first use,
  reinstalled when the sources change); threads by default;
- the same from this venv when it has pandas (the test extras install it): pyarrow imports
  pandas when it is installed, ≈ 0.25 s of start-up no asaptrace code asks for;
- ``--jobs 1`` (one file after the other, clean install): the in-run baseline of the threading;
- HTA 0.5 ``TraceAnalysis(trace_dir=DIR)`` (its own process pool), in benchmarks/.venv-hta
  (created on first use with ``pip install holistictraceanalysis``);
- the raw C scan of the same files on two threads (read + ``_kscan.scan``, nothing else: no
  import of numpy, pyarrow or polars, no hash, no tables): the machine's floor for this work;
- the single-file figure: ``asaptrace ingest`` of the first file against HTA's
  ``parse_trace_file`` of it.

Every row runs ``--repeat`` times round-robin (drift on a shared machine hits each row alike) and
the best is kept; the spread (best–worst) is printed beside it. Peak RSS is the process's own (for
HTA: the larger of its main process and its largest pool worker). The CPU seconds (user + system,
every thread) and the cores they kept busy are printed for the CLI rows: on a shared VM whose
speed drifts by 10–20 % within minutes, the CPU a run takes moves less than its wall time.
Goals (issue 19): ≥ 20× HTA, ≥ 150 MB/s, peak RSS ≤ 1.5× the largest file; the floor of the last,
the RSS of a process that has only imported numpy, pyarrow and polars, is printed beside it.
Goal (issue 28): ≥ 250 MB/s, peak RSS ≤ 600 MB on 8 files of 40 MB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _kineto_gen import generate_kineto
from ingest import has_pandas, hta_python, measure_cli, round_robin, user_asaptrace

ROOT = Path(__file__).resolve().parents[1]

_HTA = r"""
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
{body}
dt = time.perf_counter() - t0
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
pool = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({{"seconds": dt, "rss_mb": max(own, pool), "events": n}}))
"""

HTA_FOLDER = """
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
n = sum(len(a.t.get_trace(r)) for r in a.t.get_all_traces())
"""

HTA_FILE = """
from hta.common.trace import parse_trace_file
meta, df, symbols = parse_trace_file(sys.argv[1])
n = len(df)
"""


_SCAN = r"""
import json, resource, sys, threading, time
from asaptrace.ingest.kineto import _kscan
files = sys.argv[1:]
t0 = time.perf_counter()
events = []
def work():
    while files:
        try:
            path = files.pop()
        except IndexError:
            return
        with open(path, "rb") as f:
            events.append(_kscan.scan(f.read())["n"])
ts = [threading.Thread(target=work) for _ in range(2)]
for t in ts: t.start()
for t in ts: t.join()
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": time.perf_counter() - t0, "rss_mb": ru.ru_maxrss / 1024,
                  "cpu_s": ru.ru_utime + ru.ru_stime, "events": sum(events)}))
"""


SCAN_ROW = "raw C scan of the files, two threads (floor)"


def make_folder(work: Path, ranks: int, mb: int) -> Path:
    folder = work / f"kineto-{ranks}x{mb}mb"
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        path = folder / f"rank{r}.json"
        if not path.exists():
            generate_kineto(path, mb, seed=r, rank=r, world_size=ranks)
    return folder


def run_cli(args: list[str], target: Path, out: Path, script: Path | None = None) -> dict | None:
    """``asaptrace ingest TARGET -o OUT --force ARGS`` in a fresh process (:func:`ingest.measure_cli`)."""
    return measure_cli(["ingest", "{path}", "-o", "{out}", "--force", *args], target, out, script)


def import_floor(script: Path) -> float:
    """Peak RSS (MB) of a process of ``script``'s venv that only imports what an ingest needs."""
    code = "import resource, numpy, pyarrow, pyarrow.parquet, polars, msgspec; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    out = subprocess.run([str(script.with_name("python")), "-c", code], capture_output=True, text=True)
    return float(out.stdout.strip() or "nan")


def run_scan(files: list[Path]) -> dict | None:
    """The raw C scan of ``files`` on two threads, timed inside its process (no imports counted)."""
    proc = subprocess.run(
        [sys.executable, "-c", _SCAN, *map(str, files)], capture_output=True, text=True, cwd=ROOT
    )
    if proc.returncode:
        print(f"    failed: {(proc.stderr.strip().splitlines() or [proc.returncode])[-1]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_hta(python: str, body: str, path: Path) -> dict | None:
    proc = subprocess.run([python, "-c", _HTA.format(body=body), str(path)], capture_output=True, text=True)
    if proc.returncode:
        print(f"    failed: {(proc.stderr.strip().splitlines() or [proc.returncode])[-1]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--mb-per-rank", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--no-hta", action="store_true")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="asaptrace-folder-"))
    t = time.perf_counter()
    folder = make_folder(work, args.ranks, args.mb_per_rank)
    files = sorted(folder.glob("*.json"))
    first = files[0]
    total_mb = sum(f.stat().st_size for f in files) / 1e6
    largest_mb = max(f.stat().st_size for f in files) / 1e6
    print(
        f"folder: {folder} ({len(files)} files, {total_mb:.0f} MB; made in {time.perf_counter() - t:.0f} s)"
    )
    hta = hta_python(args.no_hta)
    here = Path(sys.executable).with_name("asaptrace")
    user = user_asaptrace() or here
    out, out1 = work / "folder.store", work / "file.store"
    plan = {
        "asaptrace ingest DIR (whole CLI)": lambda: run_cli([], folder, out, user),
        "asaptrace ingest DIR --jobs 1 (files one by one)": lambda: run_cli(
            ["--jobs", "1"], folder, out, user
        ),
    }
    if user != here and has_pandas(here):
        plan["asaptrace ingest DIR, pandas installed"] = lambda: run_cli([], folder, out, here)
    if hta:
        plan["HTA TraceAnalysis(trace_dir=DIR)"] = lambda: run_hta(hta, HTA_FOLDER, folder)
    plan[SCAN_ROW] = lambda: run_scan(files)
    plan["single file: asaptrace ingest FILE (whole CLI)"] = lambda: run_cli([], first, out1, user)
    if hta:
        plan["single file: HTA parse_trace_file"] = lambda: run_hta(hta, HTA_FILE, first)
    runs = round_robin(plan, args.repeat)
    best = {name: min(rs, key=lambda r: r["seconds"]) for name, rs in runs.items() if rs}
    print(
        f"\n{'measurement':48s} {'best s':>7s} {'spread s':>13s} {'MB/s':>6s} {'peak RSS':>9s} {'RSS/file':>8s} "
        f"{'vs HTA':>7s} {'CPU s':>6s} {'cores':>5s}"
    )
    for name, r in best.items():
        single = name.startswith("single")
        mb = first.stat().st_size / 1e6 if single else total_mb
        ref = best.get("single file: HTA parse_trace_file" if single else "HTA TraceAnalysis(trace_dir=DIR)")
        times = sorted(x["seconds"] for x in runs[name])
        vs = f"{ref['seconds'] / r['seconds']:6.1f}x" if ref and name != SCAN_ROW else "      -"
        cpu = (
            f"{r['cpu_s']:6.2f} {r['cpu_s'] / r['seconds']:5.2f}" if "cpu_s" in r else f"{'-':>6s} {'-':>5s}"
        )
        print(
            f"{name:48s} {r['seconds']:7.2f} {times[0]:6.2f}–{times[-1]:<6.2f} {mb / r['seconds']:6.0f} "
            f"{r['rss_mb']:7.0f}MB {r['rss_mb'] / largest_mb:8.2f} {vs} {cpu}"
        )
    ours, base, theirs = (best.get(k) for k in [*list(runs)[:2], "HTA TraceAnalysis(trace_dir=DIR)"])
    if ours and base:
        print(f"\nthreads vs one file after the other, in this run: {base['seconds'] / ours['seconds']:.2f}x")
    if ours and (floor_scan := best.get(SCAN_ROW)):
        print(
            f"whole CLI vs the raw C scan on two threads, in this run: {ours['seconds'] / floor_scan['seconds']:.1f}x "
            f"the time, {ours['cpu_s'] / floor_scan['cpu_s']:.1f}x the CPU "
            f"({ours['cpu_s'] / total_mb * 1000:.1f} vs {floor_scan['cpu_s'] / total_mb * 1000:.1f} CPU ms per MB)"
        )
    if ours:
        goals = [f"{total_mb / ours['seconds']:.0f} MB/s (goal >= 150)"]
        if theirs:
            goals.insert(0, f"{theirs['seconds'] / ours['seconds']:.1f}x HTA (goal >= 20x)")
        floor = import_floor(user)
        goals.append(
            f"peak RSS {ours['rss_mb'] / largest_mb:.1f}x the largest file (goal <= 1.5x; the imports "
            f"alone: {floor:.0f} MB, {floor / largest_mb:.1f}x)"
        )
        print("whole CLI on the folder: " + ", ".join(goals))
        print(
            f"issue 28's bar: {total_mb / ours['seconds']:.0f} MB/s (goal >= 250), peak {ours['rss_mb']:.0f} MB (goal <= 600)"
        )


if __name__ == "__main__":
    main()
