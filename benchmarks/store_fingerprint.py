"""Fingerprints of the stores that ``asaptrace ingest`` builds from the samples and the real traces.

Usage:  python benchmarks/store_fingerprint.py OUT.json [--check REF.json] [--workdir DIR]

Ingests (``build_store``, what the CLI does) each of the four ``sample_traces/*`` runs and each real
trace under ``../shared/data/traces`` (skipped when absent), then fingerprints every table: rows
sorted on every column (categoricals as strings), hashed; ``meta.json`` is kept whole except the
paths and the versions. With ``--check`` the fingerprints are compared with a reference written
before a change, and every difference is printed (exit status 1 when any).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import polars as pl

from asaptrace.pipeline import build_store
from asaptrace.store import TraceStore

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "data" / "traces"
TABLES = ("events", "args", "flows", "streams", "ranks", "batches")


def inputs() -> dict[str, list[Path]]:
    """Name → the paths given to ``build_store`` (as ``asaptrace ingest`` would get them)."""
    found = {
        f"sample:{run}": [ROOT / "sample_traces" / run / sub]
        for run, sub in (
            ("coupled", "kineto"),
            ("coupled-hot-expert", "kineto"),
            ("disaggregated", "kineto"),
            ("coupled-ascend", "ascend"),
        )
    }
    hta = TRACES / "kineto-hta-samples"
    real = {
        "real:kineto-dlrm-8rank": [TRACES / "kineto-dlrm-8rank"],
        "real:kineto-hta-sampled": sorted(hta.glob("sampled_rank-*.json.gz")),
        "real:kineto-hta-nccl": [hta / "nccl_data.json.gz"],
        "real:ascend-sample": [TRACES / "ascend-sample"],
        "real:nsys-sample": sorted((TRACES / "nsys-sample").glob("*.sqlite")),
    }
    found.update({k: v for k, v in real.items() if v and all(p.exists() for p in v)})
    return found


def _hash(df: pl.DataFrame) -> str:
    df = df.with_columns(pl.col(pl.Categorical, pl.Enum).cast(pl.String))
    df = df.sort(df.columns, nulls_last=True) if df.height else df
    h = hashlib.sha256(str(df.schema).encode())
    for row in df.iter_rows():
        h.update(repr(row).encode())
    return h.hexdigest()


def fingerprint(store: TraceStore) -> dict[str, Any]:
    tables = {}
    for name in TABLES:
        df = store.read(name)
        tables[name] = {"rows": df.height, "sha256": _hash(df)}
    meta = {k: v for k, v in store.meta.items() if k not in ("asaptrace_version",)}
    for src in meta.get("sources", []):
        src["path"] = Path(src["path"]).name
    disc = meta.get("discovery") or {}
    meta["discovery"] = json.loads(
        json.dumps(disc).replace(str(ROOT), "<root>").replace(str(TRACES), "<traces>")
    )
    return {"tables": tables, "meta": meta}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--check", type=Path, default=None)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    work = a.workdir or Path(tempfile.mkdtemp(prefix="asaptrace-fp-"))
    result = {}
    for name, paths in inputs().items():
        store = build_store(paths, work / name.replace(":", "-"), overwrite=True, jobs=1)
        result[name] = fingerprint(store)
        print(f"{name:28s} {result[name]['tables']['events']['rows']:>9,} events")
    a.out.write_text(json.dumps(result, indent=1, sort_keys=True, default=str))
    if a.check is None:
        return
    ref = json.loads(a.check.read_text())
    bad = 0
    for name in sorted(set(ref) | set(result)):
        got, want = json.loads(json.dumps(result.get(name), default=str)), ref.get(name)
        if got == want:
            print(f"same       {name}")
            continue
        bad += 1
        print(f"DIFFERENT  {name}")
        for part in ("tables", "meta"):
            g, w = (got or {}).get(part, {}), (want or {}).get(part, {})
            for key in sorted(set(g) | set(w)):
                if g.get(key) != w.get(key):
                    print(f"  {part}.{key}: {str(w.get(key))[:200]} → {str(g.get(key))[:200]}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
