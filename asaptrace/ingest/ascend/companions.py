"""The files beside an Ascend timeline: where they are, and what they say.

A torch_npu rank folder (``<name>_ascend_pt/``) holds ``ASCEND_PROFILER_OUTPUT/trace_view.json``
(the timeline) and companions read here:

* ``kernel_details.csv`` — one row per device kernel (two column sets in the wild: torch_npu's
  ``Name, Type, …, Start Time(us), Duration(us)`` and msprof's ``Op Name, OP Type, Task Type,
  Task Start Time(us), Task Duration(us)``; start times are often quoted with a trailing tab);
* ``communication.json`` — per HCCL op: Elapse / Transit / Wait / Synchronization / Idle times;
* ``profiler_info_{rank}.json`` and ``profiler_metadata.json`` (``distributed_args.rank``) — the rank.

Readers return polars frames plus counted rejections; a companion that cannot be read at all is a
one-line :class:`~asaptrace.errors.CorruptTrace` naming that file.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import polars as pl

from asaptrace.errors import CorruptTrace

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
RANK_DIR_SUFFIX = "_ascend_pt"
TIMELINE_NAMES = ("trace_view.json", "trace_view.json.gz")
KERNEL_DETAILS = "kernel_details.csv"
COMMUNICATION = "communication.json"

#: kernel_details.csv columns we use → the spellings seen across torch_npu / msprof versions.
KD_COLUMNS: dict[str, tuple[str, ...]] = {
    "name": ("Name", "Op Name"),
    "start": ("Start Time(us)", "Task Start Time(us)", "Start Time"),
    "dur": ("Duration(us)", "Task Duration(us)"),
    "stream": ("Stream ID", "Stream Id"),
    "step": ("Step Id", "Step ID"),
    "op_type": ("Type", "OP Type"),
    "core": ("Accelerator Core", "Task Type"),
    "device": ("Device_id", "Device ID", "Device Id"),
    "shapes": ("Input Shapes",),
    "dtypes": ("Input Data Types",),
}
KD_REQUIRED = ("name", "start", "dur")

_PROFILER_INFO = re.compile(r"^profiler_info_(\d+)\.json$")
_HOST_DIR = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)_(?P<ts>\d+)_ascend_pt$", re.IGNORECASE)
_EP = re.compile(r"(?:^|_)ep(\d+)(?=_|$)", re.IGNORECASE)
_DEVICE_DIR = re.compile(r"^device_(\d+)$")
_HCOM_TYPE = re.compile(r"^hcom_([A-Za-z0-9]+)")


@dataclass
class Companions:
    """Where a rank's files are (any of them may be missing)."""

    root: Path  # the rank folder (``…_ascend_pt``), or the timeline's own folder
    kernel_details: Path | None = None
    communication: Path | None = None
    profiler_info: list[Path] = field(default_factory=list)
    profiler_metadata: Path | None = None

    def paths(self) -> list[str]:
        found = [self.kernel_details, self.communication, self.profiler_metadata, *self.profiler_info]
        return [str(p) for p in found if p is not None]


def rank_root(path: Path) -> Path | None:
    """The ``…_ascend_pt`` folder (or a bare ``ASCEND_PROFILER_OUTPUT``) that ``path`` lies in."""
    for parent in list(path.parents)[:4]:
        if parent.name.lower().endswith(RANK_DIR_SUFFIX):
            return parent
    for parent in list(path.parents)[:4]:
        if parent.name == OUTPUT_DIR:
            return parent
    return None


def find_companions(timeline: Path) -> Companions:
    """The companion files of a timeline (or of a rank folder's ``kernel_details.csv``)."""
    here = timeline.parent
    root = rank_root(timeline) or here
    dirs = list(dict.fromkeys([here, root, root / OUTPUT_DIR]))
    comp = Companions(root=root)
    for d in dirs:
        if not d.is_dir():
            continue
        kd, cm = d / KERNEL_DETAILS, d / COMMUNICATION
        if comp.kernel_details is None and kd.is_file():
            comp.kernel_details = kd
        if comp.communication is None and cm.is_file():
            comp.communication = cm
        meta = d / "profiler_metadata.json"
        if comp.profiler_metadata is None and meta.is_file():
            comp.profiler_metadata = meta
        comp.profiler_info += sorted(p for p in d.glob("profiler_info*.json") if p.is_file())
    comp.profiler_info = list(dict.fromkeys(comp.profiler_info))
    if comp.kernel_details is not None and comp.kernel_details.resolve() == timeline.resolve():
        comp.kernel_details = None  # the CSV is the timeline itself
    return comp


# ---------------------------------------------------------------- kernel_details.csv


def read_kernel_details(path: Path) -> tuple[pl.DataFrame, Counter[str], int]:
    """Rows of kernel_details.csv as (name, ts_ns, dur_ns, stream, step, op_type, core, device,
    shapes, dtypes); returns (frame, rejected-by-reason, rows read)."""
    try:
        raw = pl.read_csv(
            path, infer_schema=False, truncate_ragged_lines=True, encoding="utf8-lossy", quote_char='"'
        )
    except (pl.exceptions.PolarsError, OSError) as err:
        raise CorruptTrace(f"cannot read {path.name} as CSV ({_first_line(err)})", path=path) from None
    # trimmed header names; a name that would collide with another once trimmed keeps its spelling
    trimmed = {c: c.strip().lstrip("\ufeff").strip() for c in raw.columns}
    taken = Counter(trimmed.values())
    raw = raw.rename({c: t for c, t in trimmed.items() if t != c and taken[t] == 1 and t not in raw.columns})
    picked: dict[str, str] = {}
    for key, names in KD_COLUMNS.items():
        for n in names:
            if n in raw.columns:
                picked[key] = n
                break
    missing = [KD_COLUMNS[k][0] for k in KD_REQUIRED if k not in picked]
    if missing:
        raise CorruptTrace(
            f"{path.name} lacks required column(s) {', '.join(missing)} (has: {', '.join(raw.columns[:12])})",
            path=path,
        )

    def text(key: str) -> pl.Expr:
        if key not in picked:
            return pl.lit(None, pl.String)
        return pl.col(picked[key]).str.strip_chars().str.strip_chars('"').str.strip_chars()

    frame = raw.select(
        name=text("name"),
        ts_ns=_us_to_ns(text("start")),
        dur_ns=_us_to_ns(text("dur")),
        stream=text("stream").cast(pl.Int32, strict=False),
        step=text("step").cast(pl.Int32, strict=False),
        op_type=text("op_type"),
        core=text("core"),
        device=text("device").cast(pl.Int32, strict=False),
        shapes=text("shapes"),
        dtypes=text("dtypes"),
    )
    n = frame.height
    bad = (
        pl.col("name").is_null()
        | (pl.col("name") == "")
        | pl.col("ts_ns").is_null()
        | pl.col("dur_ns").is_null()
        | (pl.col("dur_ns") < 0)
    )
    rejected: Counter[str] = Counter()
    n_bad = frame.select(bad.sum()).item()
    if n_bad:
        rejected["kernel_details_bad_row"] += int(n_bad)
    return frame.filter(~bad), rejected, n


def _us_to_ns(expr: pl.Expr) -> pl.Expr:
    """Decimal µs text → int64 ns, exactly (no float rounding); null when not a number.

    A plain ``contains`` check plus a split at the point: regex capture groups cost several
    times more on a large CSV.
    """
    ok = expr.str.contains(r"^-?\d+(?:\.\d*)?$")
    parts = expr.str.strip_prefix("-").str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    frac = parts.struct.field("field_1").fill_null("").str.slice(0, 9).str.pad_end(9, "0")
    frac_units = frac.cast(pl.Int64, strict=False)  # nine fraction digits: units of 1e-9 µs = 1e-6 ns
    value = whole * 1000 + frac_units // 1_000_000
    return pl.when(ok).then(pl.when(expr.str.starts_with("-")).then(-value).otherwise(value))


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


# ---------------------------------------------------------------- communication.json

_TIME_KEYS = {
    "hccl_elapse_ns": "Elapse Time(ms)",
    "hccl_transit_ns": "Transit Time(ms)",
    "hccl_wait_ns": "Wait Time(ms)",
    "hccl_sync_ns": "Synchronization Time(ms)",
    "hccl_idle_ns": "Idle Time(ms)",
}
_RATIO_KEYS = {"hccl_wait_ratio": "Wait Time Ratio", "hccl_sync_ratio": "Synchronization Time Ratio"}


def read_communication(path: Path) -> tuple[list[dict[str, Any]], Counter[str], int]:
    """One record per HCCL op of communication.json: op (the key), name (key before ``@``), group,
    step, start_ns (or None), collective type, and the ``extra`` metadata (times in ns)."""
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError) as err:
        raise CorruptTrace(f"cannot read {path.name} as JSON ({_first_line(err)})", path=path) from None
    if not isinstance(doc, dict):
        raise CorruptTrace(f"{path.name} is not a JSON object of steps", path=path)
    records: list[dict[str, Any]] = []
    rejected: Counter[str] = Counter()
    read = 0
    steps = [("", doc)] if ("collective" in doc or "p2p" in doc) else list(doc.items())
    for step_key, step in steps:
        if not isinstance(step, dict):
            continue
        for kind in ("collective", "p2p"):
            ops = step.get(kind)
            if not isinstance(ops, dict):
                continue
            for op, info in ops.items():
                if op == "Total Op Info":
                    continue  # the profiler's own roll-up of the ops below, not an op
                read += 1
                rec = _comm_record(str(op), info, str(step_key), kind)
                if rec is None:
                    rejected["communication_json_malformed"] += 1
                else:
                    records.append(rec)
    return records, rejected, read


def _comm_record(op: str, info: Any, step: str, kind: str) -> dict[str, Any] | None:
    times = info.get("Communication Time Info") if isinstance(info, dict) else None
    if not isinstance(times, dict):
        return None
    extra: dict[str, Any] = {"hccl_op": op, "hccl_type": kind}
    if step:
        extra["hccl_step"] = step
    for key, src in _TIME_KEYS.items():
        v = _number(times.get(src))
        if v is not None:
            extra[key] = int((v * 1_000_000).to_integral_value())
    for key, src in _RATIO_KEYS.items():
        v = _number(times.get(src))
        if v is not None:
            extra[key] = float(v)
    bw = info.get("Communication Bandwidth Info")
    if isinstance(bw, dict):
        sizes = {
            t: float(s)
            for t, d in bw.items()
            if isinstance(d, dict) and (s := _number(d.get("Transit Size(MB)"))) is not None
        }
        if sizes:
            extra["hccl_transit_mb"] = sizes
    if "hccl_elapse_ns" not in extra:
        return None
    start = _number(times.get("Start Timestamp(us)"))
    name, _, group = op.partition("@")
    m = _HCOM_TYPE.match(name)
    return {
        "op": op,
        "name": name,
        "group": group or None,
        "start_ns": int((start * 1000).to_integral_value()) if start is not None else None,
        "collective": m.group(1) if m else None,
        "extra": extra,
    }


def _number(v: Any) -> Decimal | None:
    if isinstance(v, bool) or v is None:
        return None
    try:
        d = Decimal(str(v).strip())
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


# ---------------------------------------------------------------- rank folder facts


@dataclass(frozen=True)
class FolderFacts:
    rank: int | None = None
    source: str = "unknown"
    world_size: int | None = None
    ep: int | None = None
    host: str | None = None
    device: int | None = None


def folder_facts(comp: Companions) -> FolderFacts:
    """Rank (profiler_metadata.json, then profiler_info_{rank}.json), EP index and host from the
    folder name, device from ``PROF_*/device_{n}``. The driver adds DP/TP/PP from the name."""
    rank, source, world = None, "unknown", None
    if comp.profiler_metadata is not None:
        meta = _json_or_none(comp.profiler_metadata)
        dist = meta.get("distributed_args") if isinstance(meta, dict) else None
        if isinstance(dist, dict):
            r, w = dist.get("rank"), dist.get("world_size")
            if _is_index(r):
                rank, source = r, "profiler_metadata"
            if _is_index(w):
                world = w
    if rank is None:
        found = set()
        for p in comp.profiler_info:
            if m := _PROFILER_INFO.match(p.name):
                found.add(int(m.group(1)))
            doc = _json_or_none(p)
            if isinstance(doc, dict) and _is_index(doc.get("rank_id")):
                found.add(int(doc["rank_id"]))
        if len(found) == 1:
            rank, source = found.pop(), "profiler_info"
    name = comp.root.name
    ep = int(m.group(1)) if (m := _EP.search(name)) else None
    host = None
    if (m := _HOST_DIR.match(name)) and not re.search(r"rank\d", m.group("host"), re.IGNORECASE):
        host = m.group("host")
    device = None
    for d in sorted(comp.root.glob("PROF_*/device_*")):
        if d.is_dir() and (m := _DEVICE_DIR.match(d.name)):
            device = int(m.group(1))
            break
    return FolderFacts(rank=rank, source=source, world_size=world, ep=ep, host=host, device=device)


def _is_index(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _json_or_none(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
