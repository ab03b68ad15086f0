"""Fuzz targets over the readers, the seed corpus and structured mutations.

A target takes the bytes of one file, writes them where the reader expects its file, and reads it.
The contract under test: a reader either returns an :class:`~asaptrace.ingest.base.IngestResult`
whose accounting balances, or raises one of the project's errors (:class:`AsaptraceError`) — any
other exception is a bug (:func:`run_target` lets it through).

Seeds are cut from the real traces in ``../shared/data`` (a few dozen events of every kind a file
holds, so one read takes milliseconds) and from a bundled synthetic sample.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from asaptrace.errors import AsaptraceError
from asaptrace.ingest.ascend import read_ascend
from asaptrace.ingest.base import IngestOptions, IngestResult
from asaptrace.ingest.kineto import read_kineto
from asaptrace.ingest.nsys import read_nsys

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "traces"
#: a small cap, so that a mutated size field cannot make a read allocate gigabytes
OPTIONS = IngestOptions(max_decompressed_bytes=64 << 20)


@dataclass(frozen=True)
class Target:
    """Where the fuzzed bytes go and which reader reads them."""

    name: str
    file_name: str  # relative to the work directory
    read: Callable[[Path, IngestOptions], IngestResult]
    companions: dict[str, bytes] | None = None  # other files of the input (fixed)


def _kineto(path: Path, options: IngestOptions) -> IngestResult:
    return read_kineto(path, options)


def _kineto_python(path: Path, options: IngestOptions) -> IngestResult:
    """The pure-Python decoding path (the C scanner switched off), which must agree on errors too."""
    before = os.environ.get("ASAPTRACE_NO_CSCAN")
    os.environ["ASAPTRACE_NO_CSCAN"] = "1"
    try:
        return read_kineto(path, options)
    finally:
        if before is None:
            del os.environ["ASAPTRACE_NO_CSCAN"]
        else:
            os.environ["ASAPTRACE_NO_CSCAN"] = before


def run_target(target: Target, data: bytes, work: Path) -> str:
    """Read ``data`` as ``target``'s file: ``"read"``, or ``"rejected:<Error>"`` for a project error."""
    if work.exists():
        shutil.rmtree(work)
    path = work / target.file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    for rel, blob in (target.companions or {}).items():
        (work / rel).write_bytes(blob)
    try:
        result = target.read(path, OPTIONS)
    except AsaptraceError as err:
        return f"rejected:{type(err).__name__}"
    result.accounting.check()
    return "read"


# --------------------------------------------------------------------------------------------- seeds
def _varied_events(events: list, per_kind: int = 4, head: int = 40) -> list:
    """The first ``head`` events plus the first few of every (ph, cat) the file holds."""
    out, seen = list(events[:head]), {}
    for e in events[head:]:
        key = (e.get("ph"), e.get("cat")) if isinstance(e, dict) else ("?", "?")
        if seen.get(key, 0) < per_kind:
            seen[key] = seen.get(key, 0) + 1
            out.append(e)
    return out


def _cut_kineto(raw: bytes) -> bytes:
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    doc["traceEvents"] = _varied_events(doc.get("traceEvents", []))
    return json.dumps(doc).encode()


def _cut_nsys(path: Path) -> bytes:
    """The real export with its big tables cut to 40 rows (schema and string ids intact)."""
    with tempfile.TemporaryDirectory() as tmp:
        small = Path(tmp) / "s.sqlite"
        src = sqlite3.connect(path)
        dst = sqlite3.connect(small)
        src.backup(dst)
        src.close()
        tables = [n for (n,) in dst.execute("select name from sqlite_master where type='table'")]
        for t in tables:
            if t not in ("StringIds", "ThreadNames", "ProcessStreams") and not t.startswith("TARGET_INFO"):
                dst.execute(f'delete from "{t}" where rowid not in (select rowid from "{t}" limit 40)')
        dst.commit()
        dst.execute("vacuum")
        dst.close()
        return small.read_bytes()


def seeds() -> dict[str, list[bytes]]:
    """Seed inputs per target name (empty lists where ``../shared/data`` is absent)."""
    out: dict[str, list[bytes]] = {"kineto": [], "kineto-py": [], "ascend": [], "ascend-csv": [], "nsys": []}
    kineto_files = [
        *sorted((SHARED / "kineto-dlrm-8rank").glob("worker0*.json"))[:1],
        *sorted((SHARED / "kineto-hta-samples").glob("*.json.gz")),
        *sorted((ROOT / "sample_traces" / "coupled" / "kineto").glob("rank000*.json.gz")),
        *sorted((ROOT / "sample_traces" / "disaggregated" / "kineto").glob("rank017*.json.gz")),
    ]
    for f in kineto_files:
        out["kineto"].append(_cut_kineto(f.read_bytes()))
    out["kineto-py"] = out["kineto"]
    trace_view = SHARED / "ascend-sample" / "trace_view.json"
    if trace_view.is_file():
        out["ascend"].append(json.dumps(_varied_events(json.loads(trace_view.read_text()), head=60)).encode())
        csv = (SHARED / "ascend-sample" / "kernel_details.csv").read_bytes().splitlines(keepends=True)
        out["ascend-csv"].append(b"".join(csv[:12]))
    sqlite = sorted((SHARED / "nsys-sample").glob("*.sqlite"))
    if sqlite:
        out["nsys"].append(_cut_nsys(sqlite[0]))
    return out


def targets(corpus: dict[str, list[bytes]]) -> dict[str, Target]:
    """The four targets; the Ascend ones read a timeline with a ``kernel_details.csv`` beside it."""
    out = {
        "kineto": Target("kineto", "rank0.pt.trace.json", _kineto),
        "kineto-py": Target("kineto-py", "rank0.pt.trace.json", _kineto_python),
        "nsys": Target("nsys", "report.sqlite", read_nsys),
    }
    if corpus["ascend"] and corpus["ascend-csv"]:
        prof = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"
        out["ascend"] = Target(
            "ascend",
            f"{prof}/trace_view.json",
            read_ascend,
            companions={f"{prof}/kernel_details.csv": corpus["ascend-csv"][0]},
        )
        out["ascend-csv"] = Target(
            "ascend-csv",
            f"{prof}/kernel_details.csv",
            read_ascend,
            companions={f"{prof}/trace_view.json": corpus["ascend"][0]},
        )
    return out


# --------------------------------------------------------------------------------------------- mutations
_WRONG = [None, True, "x", "", "12.5.3", [], {}, [1, [2]], -1, 0, 10**30, -(10**30), 2**63, 1e308, -1e-308]


def _paths(node: object, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside a decoded JSON document (capped, breadth first)."""
    out: list[tuple] = []
    todo = [(node, prefix)]
    while todo and len(out) < 4000:
        cur, p = todo.pop(0)
        items = cur.items() if isinstance(cur, dict) else enumerate(cur) if isinstance(cur, list) else ()
        for k, v in items:
            out.append((*p, k))
            todo.append((v, (*p, k)))
    return out


def _parent(doc: object, path: tuple) -> tuple[object, object]:
    cur = doc
    for k in path[:-1]:
        cur = cur[k]  # type: ignore[index]
    return cur, path[-1]


def mutate_json(doc: object, rng: random.Random) -> bytes:
    """One structural mutation of a JSON document: delete / duplicate a key, a wrong type, a huge
    number, deep nesting, a duplicated event; then serialised (sometimes with raw key duplicates)."""
    paths = _paths(doc)
    op = rng.choice(["delete", "wrong_type", "huge", "nest", "dup_item", "dup_key", "swap"])
    if paths:
        parent, key = _parent(doc, rng.choice(paths))
        if op == "delete":
            del parent[key]  # type: ignore[attr-defined]
        elif op == "wrong_type":
            parent[key] = rng.choice(_WRONG)  # type: ignore[index]
        elif op == "huge":
            parent[key] = rng.choice([10**19, -(10**19), 10**400, 1.7e308, 2**64 - 1])  # type: ignore[index]
        elif op == "nest":
            value: object = parent[key]  # type: ignore[index]
            for _ in range(rng.choice([50, 1000, 20000])):
                value = [value] if rng.random() < 0.5 else {"a": value}
            parent[key] = value  # type: ignore[index]
        elif op == "dup_item" and isinstance(parent, list):
            parent.insert(rng.randrange(len(parent) + 1), parent[key])  # type: ignore[index]
        elif op == "swap":
            other_parent, other_key = _parent(doc, rng.choice(paths))
            parent[key], other_parent[other_key] = other_parent[other_key], parent[key]  # type: ignore[index]
    try:
        text = json.dumps(doc)
    except (RecursionError, ValueError):
        text = json.dumps([])
    if op == "dup_key":  # a key written twice in one object: JSON allows it, parsers differ
        i = text.find('"name": ')
        if i >= 0:
            text = text[:i] + '"name": "dup", ' + text[i:]
    return text.encode()


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """One byte-level mutation: truncation, flips, non-UTF-8, a chunk repeated or removed, gzip."""
    if not data:
        return bytes([rng.randrange(256)])
    op = rng.choice(["truncate", "flip", "non_utf8", "repeat", "cut", "gzip", "gzip_truncated"])
    b = bytearray(data)
    i = rng.randrange(len(b))
    if op == "truncate":
        return bytes(b[:i])
    if op == "flip":
        for _ in range(rng.randint(1, 8)):
            j = rng.randrange(len(b))
            b[j] ^= 1 << rng.randrange(8)
        return bytes(b)
    if op == "non_utf8":
        return bytes(b[:i]) + rng.choice([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\x00"]) + bytes(b[i:])
    if op == "repeat":
        j = min(len(b), i + rng.randint(1, 4096))
        return bytes(b[:j]) + bytes(b[i:j]) * rng.randint(1, 3) + bytes(b[j:])
    if op == "cut":
        j = min(len(b), i + rng.randint(1, 4096))
        return bytes(b[:i]) + bytes(b[j:])
    packed = gzip.compress(data, mtime=0)
    return packed if op == "gzip" else packed[: rng.randrange(len(packed))]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """A structural mutation when the input decodes as JSON (half of the time), else a byte one."""
    if rng.random() < 0.5:
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, (dict, list)):
            return mutate_json(doc, rng)
    return mutate_bytes(data, rng)
