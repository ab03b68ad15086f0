"""One big rank file through the whole CLI: time, MB/s and peak RSS as the file grows.

Usage:  python benchmarks/ingest_bigfile.py [--sizes 0.1,0.5,2] [--repeat 1] [--workdir DIR] [--no-hta]
                                            [-- EXTRA INGEST ARGS…]

Each size (GB) is one Kineto rank file made on the fly (never committed; under ``--workdir``,
kept between runs) by repeating a real trace's events — rank 0 of the DLRM 8-rank run in
``../shared/data/traces`` when present, else the bundled generator's MoE-style events — with every
time shifted by a whole step span and the correlation, external and flow ids shifted alike, so
each repetition is one more profiler step. Rows, each a fresh process timed from outside:

- ``python -m asaptrace.cli ingest FILE`` of this checkout (start-up, reading, enrichment, writes,
  exit), with its peak RSS (``RUSAGE_CHILDREN``) and RSS / file size;
- the raw C scan of the same bytes (``_kscan.scan``: read + scan, nothing else), on one core and
  on both (the events cut in two at an event boundary, each half scanned by its own thread: the
  scanner lets go of the GIL) — the machine's floor for this work;
- HTA's ``parse_trace_file`` on the smallest size, when holistictraceanalysis is installed in this
  venv (a test extra); skipped with a note otherwise.

Every row also says the CPU it took (user + system, every thread) and the cores that kept busy:
on a shared VM whose speed drifts, the CPU a run takes moves less than its wall time.

Goals (issue 28): a 2 GB file at peak RSS ≤ 1 GB and ≥ 200 MB/s whole CLI.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import MEASURE_CLI

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "data" / "traces" / "kineto-dlrm-8rank"

_SCAN = r"""
import json, resource, sys, time, threading
from asaptrace.ingest.kineto import _kscan
path, threads = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
data = open(path, "rb").read()
n = 0
if threads == 1:
    n = _kscan.scan(data)["n"]
else:  # the events cut at an event boundary, each half a document of its own
    start = data.index(b"[", data.index(b'"traceEvents"')) + 1
    cut = data.index(b"\n{", len(data) // 2)
    end = data.rindex(b"]")
    docs = [b'{"traceEvents": [' + data[start:cut].rstrip().rstrip(b",") + b"]}",
            b'{"traceEvents": [' + data[cut:end] + b"]}"]
    del data
    out = [0, 0]
    def work(i):
        out[i] = _kscan.scan(docs[i])["n"]
    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts: t.start()
    for t in ts: t.join()
    n = sum(out)
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"seconds": time.perf_counter() - t0, "events": n, "rss_mb": ru.ru_maxrss / 1024,
                  "cpu_s": ru.ru_utime + ru.ru_stime}))
"""

_HTA = r"""
import json, logging, resource, sys, time
logging.disable(logging.WARNING)
t0 = time.perf_counter()
from hta.common.trace import parse_trace_file
meta, df, symbols = parse_trace_file(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t0, "events": len(df),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_SHIFTED_ARGS = ("External id", "correlation", "Ev Idx")


def _source_events() -> tuple[dict, list[dict], list[dict]]:
    """(header, metadata events, the other events) of the trace repeated."""
    if REAL.exists():
        path = sorted(REAL.glob("worker0_*.json"))[0]
    else:
        from _kineto_gen import generate_kineto

        path = Path(tempfile.mkdtemp(prefix="asaptrace-bigfile-src-")) / "rank0.json"
        generate_kineto(path, 2, rank=0, world_size=8)
    doc = msgspec.json.decode(path.read_bytes())
    events = doc.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    rest = [e for e in events if e.get("ph") != "M"]
    return doc, meta, rest


def make_file(path: Path, gb: float) -> int:
    """Write ``path`` (≥ ``gb`` GB) of repeated steps; returns the number of repetitions."""
    header, meta, events = _source_events()
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = int(max(ts) - min(ts)) + 1000  # µs: one step, then a 1 ms gap
    ids = [
        int(v)
        for e in events
        for v in [e.get("id"), *((e.get("args") or {}).get(k) for k in _SHIFTED_ARGS)]
        if isinstance(v, int)
    ]
    id_stride = (max(ids) + 1) if ids else 0
    enc = msgspec.json.Encoder()
    target = int(gb * 1e9)
    reps = 0
    tmp = path.with_suffix(".partial")
    with open(tmp, "wb") as out:
        out.write(enc.encode(header)[:-1] + b', "traceEvents": [\n')
        out.write(b",\n".join(enc.encode(e) for e in meta))
        size = out.tell()
        while size < target:
            dt, di = reps * span, reps * id_stride
            lines = []
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = e2["ts"] + dt
                if isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + di
                a = e2.get("args")
                if a:
                    a = dict(a)
                    for k in _SHIFTED_ARGS:
                        if isinstance(a.get(k), int):
                            a[k] += di
                    e2["args"] = a
                if isinstance(e2.get("name"), str) and e2["name"].startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{reps}"
                lines.append(enc.encode(e2))
            block = b",\n" + b",\n".join(lines)
            out.write(block)
            size += len(block)
            reps += 1
        out.write(b"\n]}\n")
    tmp.rename(path)
    return reps


def run(argv: list[str], code: str | None = None) -> dict | None:
    cmd = [sys.executable, "-c", code, *argv] if code else [sys.executable, "-c", MEASURE_CLI, *argv]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode:
        print(f"    failed: {(proc.stderr.strip().splitlines() or [proc.returncode])[-1]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def has_hta() -> bool:
    return subprocess.run([sys.executable, "-c", "import hta"], capture_output=True).returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0.1,0.5,2", help="file sizes in GB, comma-separated")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "asaptrace-bigfile")
    ap.add_argument("--no-hta", action="store_true")
    ap.add_argument("--no-scan", action="store_true", help="skip the raw C-scan rows")
    ap.add_argument("extra", nargs="*", help="more arguments for `asaptrace ingest` (after --)")
    a = ap.parse_args()
    sizes = [float(s) for s in a.sizes.split(",") if s]
    a.workdir.mkdir(parents=True, exist_ok=True)
    hta = not a.no_hta and has_hta()
    if not a.no_hta and not hta:
        print("HTA not installed in this venv (pip install holistictraceanalysis): its row is skipped")
    rows: list[tuple[str, float, dict]] = []
    for gb in sizes:
        path = a.workdir / f"rank0-{gb:g}gb.json"
        if not path.exists():
            print(f"making {path} …", flush=True)
            make_file(path, gb)
        mb = path.stat().st_size / 1e6
        out = a.workdir / f"store-{gb:g}gb"
        plan: dict[str, tuple[list[str], str | None]] = {
            "asaptrace ingest FILE (whole CLI)": (
                [
                    sys.executable,
                    "-m",
                    "asaptrace.cli",
                    "ingest",
                    str(path),
                    "-o",
                    str(out),
                    "--force",
                    *a.extra,
                ],
                None,
            ),
        }
        if not a.no_scan:
            plan["raw C scan, one core"] = ([str(path), "1"], _SCAN)
            plan["raw C scan, two halves on two threads"] = ([str(path), "2"], _SCAN)
        if hta and gb == min(sizes):
            plan["HTA parse_trace_file"] = ([str(path)], _HTA)
        for name, (argv, code) in plan.items():
            best = None
            for rep in range(max(1, a.repeat)):
                print(f"{mb:7.0f} MB  {name} ({rep + 1}/{a.repeat}) …", flush=True)
                r = run(argv, code)
                if r and (best is None or r["seconds"] < best["seconds"]):
                    best = r
            if best:
                rows.append((name, mb, best))
    print(
        f"\n{'file':>8s}  {'measurement':40s} {'time s':>7s} {'MB/s':>6s} {'peak RSS':>9s} {'RSS/file':>8s}"
        f" {'CPU s':>6s} {'cores':>5s}"
    )
    for name, mb, r in rows:
        cpu = (
            f"{r['cpu_s']:6.2f} {r['cpu_s'] / r['seconds']:5.2f}" if "cpu_s" in r else f"{'-':>6s} {'-':>5s}"
        )
        print(
            f"{mb:6.0f}MB  {name:40s} {r['seconds']:7.2f} {mb / r['seconds']:6.0f} "
            f"{r['rss_mb']:7.0f}MB {r['rss_mb'] / mb:7.2f}x {cpu}"
        )


if __name__ == "__main__":
    main()
