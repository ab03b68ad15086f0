"""Ingest speed: asaptrace vs. a plain json.load loop vs. Holistic Trace Analysis, on the same file.

Usage:  python benchmarks/ingest.py [--size-mb 400] [--workdir DIR] [--no-hta] [--no-cli]
        python benchmarks/ingest.py --profile [--size-mb 400 | --folder DIR]

``--profile`` prints where an ingest's time goes, phase by phase, in this process (each phase
timed on its own, one file after the other: read bytes, C scan, tables, sha256, raw scratch
parts; then the whole ``build_store`` with the enrichment's own phases timed through its progress
callback), against the whole run's wall time measured in the same run; the start-up and imports
are timed in a fresh process.

The "whole CLI" rows run the ``asaptrace`` console script the way a user does (a fresh process:
interpreter start-up, imports, parse, hash, enrichment, Parquet writes, exit), timed from outside,
against the same HTA loader run: ``asaptrace --version`` (start-up and imports only), ``ingest
--no-enrich`` and ``ingest``; their differences are what imports and enrichment cost.

Each measurement runs in a fresh subprocess so its peak RSS is its own; ``--repeat N`` runs every
row N times round-robin and keeps the best (use 3 on a shared machine). Figures are printed with
ratios against the baselines measured in the same run (the machine is shared and noisy: absolute
times drift, ratios hold). HTA runs in its own virtualenv (benchmarks/.venv-hta, created on first
use with `pip install holistictraceanalysis`); where that cannot be installed it is skipped with a
message.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _kineto_gen import generate_kineto

HERE = Path(__file__).resolve().parent

_MEASURE = r"""
import json, resource, sys, time
path, out = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
{body}
dt = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({{"seconds": dt, "rss_mb": rss, "events": n}}))
"""

BODIES = {
    "asaptrace read_kineto (parse only)": """
from asaptrace.ingest.kineto import read_kineto
r = read_kineto(path)
n = r.events.num_rows
""",
    "asaptrace ingest (parse + hash + Parquet store)": """
from asaptrace.ingest.driver import ingest_paths
s = ingest_paths([path], out, jobs=1, overwrite=True)
n = s.meta["accounting"]["kept"]
""",
    "baseline: json.load + per-event loop": """
with open(path) as f:
    doc = json.load(f)
cols = {k: [] for k in ("ph", "name", "cat", "pid", "tid", "ts", "dur", "corr")}
for e in doc["traceEvents"]:
    if e.get("ph") != "X":
        continue
    cols["ph"].append(e["ph"]); cols["name"].append(e["name"]); cols["cat"].append(e.get("cat"))
    cols["pid"].append(e["pid"]); cols["tid"].append(e["tid"])
    cols["ts"].append(int(float(e["ts"]) * 1000)); cols["dur"].append(int(float(e["dur"]) * 1000))
    cols["corr"].append(e.get("args", {}).get("correlation"))
n = len(cols["ph"])
""",
    "HTA 0.5 parse_trace_file": """
from hta.common.trace import parse_trace_file
meta, df, symbols = parse_trace_file(path)
n = len(df)
""",
}


def measure(python: str, body: str, path: Path, out: Path) -> dict | None:
    code = _MEASURE.format(body=body)
    proc = subprocess.run([python, "-c", code, str(path), str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        print(
            f"    failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
        )
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: The whole-CLI rows: the console script's arguments after ``asaptrace`` ({path}, {out} filled in).
CLI_RUNS = {
    "asaptrace --version (CLI start-up + imports)": ["--version"],
    "asaptrace ingest --no-enrich (whole CLI)": ["ingest", "{path}", "-o", "{out}", "--force", "--no-enrich"],
    "asaptrace ingest (whole CLI, as a user runs it)": ["ingest", "{path}", "-o", "{out}", "--force"],
}

#: Runs the command in its argv and prints its wall time, peak RSS and CPU (user + system, every
#: thread) as JSON: the console script timed from outside, in a fresh process.
MEASURE_CLI = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
dt = time.perf_counter() - t0
if proc.returncode:
    sys.exit(proc.stderr.strip() or proc.returncode)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"seconds": dt, "rss_mb": ru.ru_maxrss / 1024, "cpu_s": ru.ru_utime + ru.ru_stime}))
"""


def measure_cli(args: list[str], path: Path, out: Path, script: Path | None = None) -> dict | None:
    """Wall time, peak RSS and CPU time (user + system, every thread) of one run of the console
    script (``script``: this venv's), in a fresh process of its own."""
    script = script or Path(sys.executable).with_name("asaptrace")
    argv = [str(script), *(a.format(path=path, out=out) for a in args)]
    proc = subprocess.run([sys.executable, "-c", MEASURE_CLI, *argv], capture_output=True, text=True)
    if proc.returncode != 0:
        print(
            f"    failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
        )
        return None
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    meta = out / "meta.json"
    r["events"] = json.loads(meta.read_text())["accounting"]["kept"] if "ingest" in args else 0
    return r


def print_cli_summary(results: dict[str, dict], hta_r: dict | None) -> None:
    """Where the whole-CLI time goes (start-up, enrichment, the rest) and its ratio against HTA."""
    start, raw, full = (results.get(name) for name in CLI_RUNS)
    if not (start and raw and full):
        return
    t = full["seconds"]
    enrich, rest = t - raw["seconds"], raw["seconds"] - start["seconds"]
    if enrich > 0 and rest > 0:
        print(
            f"\nwhole-CLI ingest {t:.2f} s = start-up + imports {start['seconds']:.2f} s"
            f" + enrichment {enrich:.2f} s + parse/hash/write/exit {rest:.2f} s"
        )
    else:
        print(f"\nwhole-CLI ingest {t:.2f} s (too noisy in this run to split; try a larger --repeat)")
    if hta_r:
        print(f"whole-CLI ingest vs HTA's loader in this run: {hta_r['seconds'] / t:.1f}x (goal: >= 20x)")


def round_robin(plan: dict[str, Callable[[], dict | None]], repeat: int) -> dict[str, list[dict]]:
    """Every measurement of ``plan`` ``repeat`` times, round-robin (drift on a shared machine hits
    every row alike); the results of each, failed runs left out."""
    runs: dict[str, list[dict]] = {name: [] for name in plan}
    for rep in range(max(1, repeat)):
        for name, run in plan.items():
            print(f"{name} ({rep + 1}/{repeat}) …", flush=True)
            if r := run():
                runs[name].append(r)
    return runs


def hta_python(no_hta: bool) -> str | None:
    if no_hta:
        return None
    venv = HERE / ".venv-hta"
    py = venv / "bin" / "python"
    if not py.exists():
        print("creating benchmarks/.venv-hta with holistictraceanalysis (first run only)…")
        ok = (
            subprocess.run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
            and subprocess.run([str(py), "-m", "pip", "install", "-q", "holistictraceanalysis"]).returncode
            == 0
        )
        if not ok:
            print("HTA unavailable (could not install holistictraceanalysis): skipped")
            return None
    return str(py)


def user_asaptrace() -> Path | None:
    """The ``asaptrace`` console script of a clean install of this checkout (``pip install .``:
    the runtime dependencies only, what a user gets), in benchmarks/.venv-user; reinstalled when
    the package's sources changed. None when it cannot be installed."""
    venv = HERE / ".venv-user"
    py, script = venv / "bin" / "python", venv / "bin" / "asaptrace"
    root = HERE.parent
    sources = sorted(
        p for p in (root / "asaptrace").rglob("*") if p.suffix in (".py", ".c", ".toml", ".json")
    )
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in [root / "pyproject.toml", *sources])).hexdigest()
    stamp = venv / "installed-from"
    if script.exists() and stamp.exists() and stamp.read_text() == digest:
        return script
    print("installing this checkout into benchmarks/.venv-user (pip install ., runtime dependencies only)…")
    ok = (py.exists() or subprocess.run([sys.executable, "-m", "venv", str(venv)]).returncode == 0) and (
        subprocess.run([str(py), "-m", "pip", "install", "-q", str(root)]).returncode == 0
        and subprocess.run(
            [str(py), "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", str(root)]
        ).returncode
        == 0
    )
    if not ok:
        print("a clean install failed: the asaptrace rows run in this venv")
        return None
    stamp.write_text(digest)
    return script


def has_pandas(script: Path) -> bool:
    """Whether the venv of ``script`` has pandas (pyarrow then imports it: ≈ 0.25 s of start-up)."""
    py = script.with_name("python")
    return subprocess.run([str(py), "-c", "import pandas"], capture_output=True).returncode == 0


def profile(files: list[Path], work: Path) -> None:
    """Print the time of each ingest phase (see the module docstring) for ``files``."""
    t = time.perf_counter()
    code = "import asaptrace.cli.app, asaptrace.pipeline"
    subprocess.run([sys.executable, "-c", code], check=True)
    startup = time.perf_counter() - t
    import shutil

    from asaptrace.enrich.streaming import enrich_streaming
    from asaptrace.ingest.kineto.reader import decode_columns
    from asaptrace.ingest.kineto.tables import tables_of as _tables
    from asaptrace.ingest.source import read_source_bytes
    from asaptrace.pipeline import build_store
    from asaptrace.store import write_part

    phases: dict[str, float] = {}
    cpu: dict[
        str, float
    ] = {}  # CPU seconds of every thread of this process (a loaded machine inflates wall time only)

    def timed(name: str, fn: Callable, *a):
        t, c = time.perf_counter(), time.process_time()
        r = fn(*a)
        phases[name] = phases.get(name, 0.0) + time.perf_counter() - t
        cpu[name] = cpu.get(name, 0.0) + time.process_time() - c
        return r

    parts = work / "profile-parts"
    for i, f in enumerate(files):
        data = timed("file: read bytes", read_source_bytes, f)
        cols = timed("file: C scan + columns", decode_columns, data, f)
        del data
        res = timed("file: canonical tables", _tables, cols, f)
        timed("file: sha256", lambda p: hashlib.sha256(p.read_bytes()).hexdigest(), f)
        for name in ("events", "args", "flows"):
            table = getattr(res, name)
            timed(
                "file: raw scratch parts (Arrow IPC)",
                lambda t, n=name, k=i: write_part(parts, n, f"{k:05d}", t, scratch=True),
                table,
            )
        del cols, res
    shutil.rmtree(parts, ignore_errors=True)
    serial_files = sum(phases.values())
    enrich_phase = {"name": "", "t": 0.0, "c": 0.0}

    def tick(phase: str, done: int, total: int) -> None:
        now, c = time.perf_counter(), time.process_time()
        if enrich_phase["name"] and enrich_phase["name"] != phase:
            key = f"enrich: {enrich_phase['name']}"
            phases[key] = phases.get(key, 0.0) + now - enrich_phase["t"]
            cpu[key] = cpu.get(key, 0.0) + c - enrich_phase["c"]
        if enrich_phase["name"] != phase:
            enrich_phase.update(name=phase, t=now, c=c)

    import asaptrace.enrich.streaming as streaming

    real = streaming.enrich_streaming

    def timed_enrich(*a, **k):
        t, c = time.perf_counter(), time.process_time()
        out = real(*a, **k)
        tick("", 0, 0)
        phases["enrich (total)"] = time.perf_counter() - t
        cpu["enrich (total)"] = time.process_time() - c
        return out

    streaming.enrich_streaming = timed_enrich
    t, c = time.perf_counter(), time.process_time()
    build_store(files, work / "profile.store", overwrite=True, enrich_progress=tick)
    whole, whole_cpu = time.perf_counter() - t, time.process_time() - c
    streaming.enrich_streaming = enrich_streaming
    mb = sum(f.stat().st_size for f in files) / 1e6
    print(f"\nprofile of {len(files)} file(s), {mb:.0f} MB (phases timed one at a time, in this process)")
    print(f"  {'phase':42s} {'wall s':>7s} {'CPU s':>7s}")
    print(f"  {'start-up + imports (fresh process)':42s} {startup:7.2f}")
    for name, s in phases.items():
        print(f"  {name:42s} {s:7.2f} {cpu[name]:7.2f}")
    print(
        f"  {'file phases, one after the other':42s} {serial_files:7.2f} {sum(v for k, v in cpu.items() if k.startswith('file')):7.2f}"
    )
    print(
        f"  {'build_store as run (files + enrichment)':42s} {whole:7.2f} {whole_cpu:7.2f}  ({mb / whole:.0f} MB/s)"
    )
    print(
        f"  {'  of which reading the files':42s} {whole - phases['enrich (total)']:7.2f} {whole_cpu - cpu['enrich (total)']:7.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=400)
    ap.add_argument("--profile", action="store_true", help="print where the time goes, phase by phase")
    ap.add_argument("--folder", type=Path, default=None, help="with --profile: profile this folder's files")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--no-hta", action="store_true", help="skip the HTA comparison")
    ap.add_argument("--no-formats", action="store_true", help="skip the Ascend / nsys ingest figures")
    ap.add_argument("--no-cli", action="store_true", help="skip the whole-CLI rows")
    ap.add_argument("--repeat", type=int, default=1, help="best of N round-robin runs of every row")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="asaptrace-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.profile and args.folder:
        from asaptrace.ingest.discovery import find_sources

        profile(find_sources([args.folder]).files, work)
        return
    trace = work / f"kineto-{args.size_mb}mb.json"
    if not trace.exists():
        t = time.perf_counter()
        n = generate_kineto(trace, args.size_mb)
        print(f"generated {trace} ({n:,} events) in {time.perf_counter() - t:.1f}s")
    if args.profile:
        profile([trace], work)
        return
    size_mb = trace.stat().st_size / 1e6
    print(f"file: {trace.name}, {size_mb:.0f} MB\n")
    hta = hta_python(args.no_hta)
    # every measurement is a callable; with --repeat N they run round-robin and the best of N is
    # kept, so drift on a shared machine hits every row alike (HTA included)
    plan: dict[str, Callable[[], dict | None]] = {}
    for name, body in BODIES.items():
        python = hta if name.startswith("HTA") else sys.executable
        if python is None:
            print(f"{name}: skipped")
            continue
        plan[name] = functools.partial(measure, python, body, trace, work / "store")
    if not args.no_cli:
        plan.update(
            {n: functools.partial(measure_cli, a, trace, work / "cli.store") for n, a in CLI_RUNS.items()}
        )
    runs = round_robin(plan, args.repeat)
    results = {name: min(rs, key=lambda r: r["seconds"]) for name, rs in runs.items() if rs}
    base = results.get("baseline: json.load + per-event loop")
    hta_r = next((v for k, v in results.items() if k.startswith("HTA")), None)
    print(
        f"\n{'measurement':50s} {'s':>7s} {'MB/s':>7s} {'peak RSS':>9s} {'RSS/file':>8s} {'vs loop':>8s} {'vs HTA':>7s}"
    )
    for name, r in results.items():
        mbps = f"{size_mb / r['seconds']:7.0f}" if r["events"] else "      -"
        vs_base = f"{base['seconds'] / r['seconds']:.2f}x" if base else "-"
        vs_hta = f"{hta_r['seconds'] / r['seconds']:.1f}x" if hta_r else "-"
        print(
            f"{name:50s} {r['seconds']:7.2f} {mbps} {r['rss_mb']:7.0f}MB {r['rss_mb'] / size_mb:8.2f} "
            f"{vs_base:>8s} {vs_hta:>7s}"
        )
    print_cli_summary(results, hta_r)
    if not args.no_formats:
        try:
            from ingest_formats import bench_formats
        except ImportError:
            return
        print("\nother formats:")
        for row in bench_formats(work):
            print(
                f"  {row['format']:10s} {row['mb']:7.0f} MB {row['seconds']:7.2f} s {row['mb_per_s']:7.0f} MB/s"
            )


if __name__ == "__main__":
    main()
