"""Builders of small Kineto traces for tests: events in, a file on disk out."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def kernel(
    name: str,
    ts: Any,
    dur: Any,
    *,
    pid: Any = 0,
    tid: Any = 7,
    corr: int | None = None,
    cat: str = "kernel",
    **args: Any,
) -> dict:
    a = dict(args)
    if corr is not None:
        a["correlation"] = corr
        a["stream"] = tid
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": a}


def cpu_op(name: str, ts: Any, dur: Any, *, pid: Any = 100, tid: Any = 100, **args: Any) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }


def gpu_process(pid: int = 0) -> list[dict]:
    return [
        {"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"name": "python3"}},
        {
            "name": "process_labels",
            "ph": "M",
            "ts": 0,
            "pid": pid,
            "tid": 0,
            "args": {"labels": f"GPU {pid}"},
        },
    ]


def write_trace(
    path: Path,
    events: list[dict],
    *,
    rank: int | None = 0,
    top: str = "object",
    gz: bool = False,
    **header: Any,
) -> Path:
    """Write a Kineto-style file; ``top='list'`` writes a bare list of events."""
    if top == "list":
        doc: Any = events
    else:
        doc = {"schemaVersion": 1, **header, "traceEvents": events}
        if rank is not None:
            doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 8}
    text = json.dumps(doc).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.write_bytes(gzip.compress(text, mtime=0))
    else:
        path.write_bytes(text)
    return path
