"""Companion files → rows of the canonical tables of an Ascend rank.

``kernel_details.csv`` rows and ``communication.json`` ops are matched to the timeline's device
slices by name and start (within 1 µs): a match enriches the slice's ``args`` row, a row the
timeline lacks becomes an event, a CSV row far outside the timeline (another run) is rejected.
Every row read is counted in the rank's accounting. Rules are documented in ``docs/formats/ascend.md``.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.accounting import Accounting
from asaptrace.ingest.ascend.companions import read_communication, read_kernel_details
from asaptrace.ingest.base import dictionary
from asaptrace.schema import ARGS_SCHEMA, EVENTS_SCHEMA, STREAMS_SCHEMA, Kind

MATCH_TOLERANCE_NS = 1_000  # a companion row and a timeline slice are the same if starts differ ≤ 1 µs
SPAN_MARGIN_NS = 1_000_000_000  # CSV rows further than 1 s outside the timeline belong to another run


@dataclass
class Build:
    """Tables being completed with companion rows."""

    events: pa.Table
    args: pa.Table
    streams: pa.Table
    next_eid: int
    new_events: list[pa.Table] = field(default_factory=list)
    new_args: list[pl.DataFrame] = field(default_factory=list)  # eid + some ARGS_SCHEMA columns
    new_streams: list[dict[str, Any]] = field(default_factory=list)

    def fresh_pid(self) -> int:
        used = set(pc.unique(self.events["pid"]).to_pylist()) | set(self.streams["pid"].to_pylist())
        used |= {r["pid"] for r in self.new_streams}
        return min([0, *used]) - 1

    def eids(self, n: int) -> np.ndarray:
        out = np.arange(self.next_eid, self.next_eid + n, dtype=np.int64)
        self.next_eid += n
        return out

    def add_stream(self, pid: int, stream: int, process: str, thread: str | None = None) -> None:
        known = {(r["pid"], r["stream"]) for r in self.streams.select(["pid", "stream"]).to_pylist()}
        known |= {(r["pid"], r["stream"]) for r in self.new_streams}
        if (pid, stream) not in known:
            self.new_streams.append(
                {
                    "rank": -1,
                    "pid": pid,
                    "stream": stream,
                    "is_device": True,
                    "source_pid": None,
                    "source_tid": None,
                    "process_name": process,
                    "process_label": "NPU",
                    "thread_name": thread,
                }
            )

    def finish(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        events = pa.concat_tables([t.cast(EVENTS_SCHEMA) for t in (self.events, *self.new_events)])
        streams = self.streams.cast(STREAMS_SCHEMA)
        if self.new_streams:
            streams = pa.concat_tables(
                [streams, pa.Table.from_pylist(self.new_streams, schema=STREAMS_SCHEMA)]
            )
        return events, _merge_args(self.args.cast(ARGS_SCHEMA), self.new_args), streams


def _device_frame(b: Build, roles: dict[tuple[int, int], str], prefer: str | None = None) -> pl.DataFrame:
    """Device slices of the timeline: name, ts_ns, eid (only role ``prefer`` when it has any)."""
    ev = b.events.select(["pid", "stream", "is_device", "name", "ts_ns", "eid"])
    df = pl.from_arrow(ev.filter(ev["is_device"])).with_columns(pl.col("name").cast(pl.String))
    if prefer is not None:
        keys = [k for k, r in roles.items() if r == prefer]
        if keys:
            sel = pl.DataFrame(
                {"pid": [k[0] for k in keys], "stream": [k[1] for k in keys]},
                schema={"pid": pl.Int32, "stream": pl.Int32},
            )
            df = df.join(sel, on=["pid", "stream"], how="semi")
    return df.select("name", "ts_ns", "eid")


def _match(rows: pl.DataFrame, slices: pl.DataFrame) -> pl.DataFrame:
    """Attach to each row (name, ts_ns, i) the eid of the same-named slice starting within 1 µs;
    a slice claimed by several rows keeps the first, the others get ``dup = true``."""
    if slices.height == 0 or rows.height == 0:
        return rows.with_columns(eid=pl.lit(None, pl.Int64), dup=pl.lit(False))
    hit = (
        rows.sort("ts_ns")
        .join_asof(
            slices.sort("ts_ns").with_columns(slice_ts=pl.col("ts_ns")),
            on="ts_ns",
            by="name",
            strategy="nearest",
            tolerance=MATCH_TOLERANCE_NS,
            check_sortedness=False,
        )
        .sort("i")
    )
    dup = (
        pl.col("eid").is_not_null()
        & pl.col("eid").is_duplicated()
        & (pl.col("i") != pl.col("i").min().over("eid"))
    )
    return hit.with_columns(dup=dup.fill_null(False)).drop("slice_ts")


def add_kernel_details(
    b: Build,
    path: Path,
    acc: Accounting,
    notes: dict[str, Any],
    roles: dict[tuple[int, int], str],
    *,
    against_timeline: bool,
) -> list[int]:
    kd, rejected, n = read_kernel_details(path)
    acc.read += n
    acc.rejected.update(rejected)
    kd = kd.with_row_index("i")
    hit = _match(kd, _device_frame(b, roles, prefer="device"))
    matched = hit.filter(pl.col("eid").is_not_null() & ~pl.col("dup"))
    dups = hit.filter(pl.col("dup")).height
    informative = matched.filter(_KD_INFORMATIVE)
    b.new_args.append(informative.select("eid", *_KD_ARGS))
    _count(acc.kept, "args", informative.height)
    _count(acc.rejected, "kernel_details_duplicate", dups + matched.height - informative.height)
    rest = hit.filter(pl.col("eid").is_null())
    outside = 0
    if against_timeline and b.events.num_rows and rest.height:
        lo = int(pc.min(b.events["ts_ns"]).as_py())
        hi = int(pc.max(pc.add(b.events["ts_ns"], b.events["dur_ns"])).as_py())
        out_mask = ((pl.col("ts_ns") + pl.col("dur_ns")) < lo - SPAN_MARGIN_NS) | (
            pl.col("ts_ns") > hi + SPAN_MARGIN_NS
        )
        outside = rest.filter(out_mask).height
        rest = rest.filter(~out_mask)
        if outside:
            _count(acc.rejected, "kernel_details_outside_timeline", outside)
            notes["warnings"].append(
                f"{outside} of {n} rows of {path.name} lie outside the timeline's time span "
                "(a CSV of another run?) and were not used"
            )
    notes["kernel_details"] = {"rows": n, "matched": matched.height, "added": rest.height, "outside": outside}
    devices = kd["device"].drop_nulls().to_list()
    if rest.height == 0:
        return devices
    dev_pids = [k[0] for k, r in roles.items() if r == "device"]
    if dev_pids:
        pid = max(set(dev_pids), key=dev_pids.count)
    elif devices and against_timeline is False:
        pid = max(set(devices), key=devices.count)
    else:
        pid = b.fresh_pid()
    streams = rest["stream"].fill_null(-1).to_numpy().astype(np.int32)
    for s in sorted(set(streams.tolist())):
        b.add_stream(pid, s, "kernel_details.csv", f"Stream {s}" if s >= 0 else None)
    core = rest["core"].fill_null("").str.to_uppercase()
    kind = pl.select(
        pl.when(core.str.contains("HCCL|COMMUNICATION"))
        .then(pl.lit(Kind.COLLECTIVE.value))
        .otherwise(pl.lit(Kind.COMPUTE.value))
    ).to_series()
    eids = b.eids(rest.height)
    b.new_events.append(
        _events_table(
            pid,
            streams,
            kind.to_list(),
            rest["name"].to_list(),
            "kernel_details",
            rest["ts_ns"].to_numpy(),
            rest["dur_ns"].to_numpy(),
            eids,
        )
    )
    b.new_args.append(rest.with_columns(eid=pl.Series(eids)).filter(_KD_INFORMATIVE).select("eid", *_KD_ARGS))
    _count(acc.kept, "events", rest.height)
    return devices


def _count(counter: Counter[str], key: str, n: int) -> None:
    if n:
        counter[key] += n


def _json_object(**cols: str) -> pl.Expr:
    """A JSON object of the non-null columns (key = keyword), or null when all are null."""
    pieces = [
        pl.when(pl.col(c).is_not_null()).then(
            pl.struct(pl.col(c).alias(k)).struct.json_encode().str.strip_prefix("{").str.strip_suffix("}")
        )
        for k, c in cols.items()
    ]
    body = pl.concat_str(pieces, separator=",", ignore_nulls=True)
    return pl.when(body != "").then(pl.concat_str([pl.lit("{"), body, pl.lit("}")]))


_KD_INFORMATIVE = pl.any_horizontal(
    pl.col("shapes").is_not_null(),
    pl.col("dtypes").is_not_null(),
    pl.col("op_type").is_not_null(),
    pl.col("step").is_not_null(),  # the kernel's step (Step Id): the enrichment's steps
)
_KD_ARGS = (
    pl.col("shapes").alias("input_dims"),
    pl.col("dtypes").alias("input_type"),
    _json_object(op_type="op_type", core="core", profiler_step="step").alias("extra"),
)


def add_communication(
    b: Build, path: Path, acc: Accounting, notes: dict[str, Any], roles: dict[tuple[int, int], str]
) -> None:
    records, rejected, n = read_communication(path)
    acc.read += n
    acc.rejected.update(rejected)
    if not records:
        notes["communication"] = {"ops": n, "matched": 0, "added": 0}
        return
    recs = pl.DataFrame(
        {
            "i": list(range(len(records))),
            "name": [r["name"] for r in records],
            "ts_ns": [r["start_ns"] for r in records],
        },
        schema={"i": pl.UInt32, "name": pl.String, "ts_ns": pl.Int64},
    )
    slices = _device_frame(b, roles, prefer="hccl_op")
    timed = _match(recs.filter(pl.col("ts_ns").is_not_null()), slices)
    untimed = _match_in_order(recs.filter(pl.col("ts_ns").is_null()), slices)
    hit = pl.concat([timed.select("i", "eid", "dup"), untimed], how="vertical_relaxed").sort("i")
    eid_of = dict(zip(hit["i"].to_list(), hit["eid"].to_list(), strict=True))
    dup_of = dict(zip(hit["i"].to_list(), hit["dup"].to_list(), strict=True))
    op_keys = [k for k, r in roles.items() if r == "hccl_op"]
    matched = added = 0
    comm_args: list[dict[str, Any]] = []
    new_rows: list[tuple[int, dict[str, Any]]] = []
    for i, rec in enumerate(records):
        eid = eid_of.get(i)
        if dup_of.get(i):
            acc.rejected["communication_json_duplicate"] += 1
        elif eid is not None:
            comm_args.append(_comm_args(eid, rec))
            matched += 1
        elif rec["start_ns"] is not None:
            new_rows.append((i, rec))
        else:
            acc.rejected["communication_json_unmatched"] += 1
    if new_rows:
        if op_keys:
            pid, stream = sorted(op_keys)[0]
        else:
            pid, stream = b.fresh_pid(), 0
            b.add_stream(pid, stream, "communication.json", "Communication")
        eids = b.eids(len(new_rows))
        recs_new = [r for _, r in new_rows]
        b.new_events.append(
            _events_table(
                pid,
                np.full(len(recs_new), stream, np.int32),
                [Kind.COLLECTIVE.value] * len(recs_new),
                [r["name"] for r in recs_new],
                "communication_json",
                np.array([r["start_ns"] for r in recs_new], np.int64),
                np.array([r["extra"]["hccl_elapse_ns"] for r in recs_new], np.int64),
                eids,
            )
        )
        comm_args += [_comm_args(eid, rec) for eid, rec in zip(eids.tolist(), recs_new, strict=True)]
        added = len(new_rows)
    if comm_args:
        b.new_args.append(
            pl.DataFrame(
                comm_args,
                schema={"eid": pl.Int64, "collective": pl.String, "pg_name": pl.String, "extra": pl.String},
            )
        )
    _count(acc.kept, "args", matched)
    _count(acc.kept, "events", added)
    notes["communication"] = {"ops": n, "matched": matched, "added": added}


def _match_in_order(rows: pl.DataFrame, slices: pl.DataFrame) -> pl.DataFrame:
    """Rows without a start time: the k-th row of a name ↔ the k-th slice of that name, when the
    counts agree (otherwise unmatched)."""
    if rows.height == 0:
        return pl.DataFrame(schema={"i": pl.UInt32, "eid": pl.Int64, "dup": pl.Boolean})
    r = rows.with_columns(k=pl.int_range(pl.len()).over("name"), n=pl.len().over("name"))
    s = slices.sort("ts_ns").with_columns(k=pl.int_range(pl.len()).over("name"), n=pl.len().over("name"))
    j = r.join(s.select("name", "k", "n", "eid"), on=["name", "k", "n"], how="left")
    return j.select("i", "eid", dup=pl.lit(False))


def _comm_args(eid: int, rec: dict[str, Any]) -> dict[str, Any]:
    return {
        "eid": eid,
        "collective": rec["collective"],
        "pg_name": rec["group"],
        "extra": json.dumps(rec["extra"]),
    }


def _events_table(
    pid: int,
    streams: np.ndarray,
    kinds: list[str],
    names: list[str],
    cat: str,
    ts: np.ndarray,
    dur: np.ndarray,
    eids: np.ndarray,
) -> pa.Table:
    n = len(names)
    return pa.table(
        {
            "rank": pa.array(np.full(n, -1, np.int32)),
            "pid": pa.array(np.full(n, pid, np.int32)),
            "stream": pa.array(streams.astype(np.int32)),
            "is_device": pa.array(np.ones(n, bool)),
            "kind": dictionary(pa.array(kinds, pa.string())),
            "name": dictionary(pa.array(names, pa.string())),
            "cat": dictionary(pa.array([cat] * n, pa.string())),
            "ts_ns": pa.array(np.asarray(ts, np.int64)),
            "dur_ns": pa.array(np.asarray(dur, np.int64)),
            "step": pa.nulls(n, pa.int32()),
            "layer": pa.nulls(n, pa.int16()),
            "micro_batch": pa.nulls(n, pa.int8()),
            "corr": pa.nulls(n, pa.int64()),
            "eid": pa.array(eids),
        },
        schema=EVENTS_SCHEMA,
    )


def _merge_args(base: pa.Table, parts: list[pl.DataFrame]) -> pa.Table:
    """Append companion args rows; a row for an eid that already has one is merged into it (first
    non-null value per column, ``extra`` objects united)."""
    parts = [p for p in parts if p.height]
    if not parts:
        return base
    schema = pl.from_arrow(ARGS_SCHEMA.empty_table()).schema
    new = pl.concat(parts, how="diagonal_relaxed")
    new = new.select(
        [(pl.col(n) if n in new.columns else pl.lit(None)).cast(t).alias(n) for n, t in schema.items()]
    )
    new = new.with_columns(rank=pl.lit(-1, pl.Int32))
    clash_eids = set(new.filter(pl.col("eid").is_duplicated())["eid"].to_list())
    clash_eids |= set(
        pc.filter(base["eid"], pc.is_in(base["eid"], pa.array(new["eid"].to_numpy()))).to_pylist()
    )
    if not clash_eids:
        return pa.concat_tables([base, new.to_arrow().cast(ARGS_SCHEMA)]).sort_by("eid")
    clash = pa.array(sorted(clash_eids), pa.int64())
    merged: dict[int, dict[str, Any]] = {}
    olds = base.filter(pc.is_in(base["eid"], clash)).to_pylist()
    news = new.filter(pl.col("eid").is_in(sorted(clash_eids))).to_dicts()
    for row in [*olds, *news]:
        merged[row["eid"]] = _merge_row(merged[row["eid"]], row) if row["eid"] in merged else row
    keep_new = new.filter(~pl.col("eid").is_in(sorted(clash_eids))).to_arrow().cast(ARGS_SCHEMA)
    return pa.concat_tables(
        [
            base.filter(pc.invert(pc.is_in(base["eid"], clash))),
            keep_new,
            pa.Table.from_pylist(list(merged.values()), schema=ARGS_SCHEMA),
        ]
    ).sort_by("eid")


def _merge_row(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = {k: (a.get(k) if a.get(k) is not None else b.get(k)) for k in ARGS_SCHEMA.names}
    if a.get("extra") and b.get("extra"):
        out["extra"] = json.dumps(json.loads(a["extra"]) | json.loads(b["extra"]))
    return out
