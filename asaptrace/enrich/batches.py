"""Batch composition (which requests, of which lengths, each DP group ran at each step).

From a sidecar file when the user gives one (``--batches batches.jsonl``), else from the step
annotations' args (``dp_group``, ``seq_lens``, ``cached_lens``, ``request_ids``), else whatever the
store already holds. A sidecar line is either one request::

    {"step": 0, "dp_group": 3, "seq_len": 4096, "request_id": "r17", "cached_len": 0, "arrival_ns": 12}

or one batch, with lists::

    {"step": 0, "dp_group": 3, "seq_lens": [4096, 512], "request_ids": ["r17", "r18"],
     "arrivals_ns": [1749999999012000000, 1749999999013500000]}

``micro_batch``, ``request_id(s)``, ``cached_len(s)``, ``arrival_ns`` / ``arrivals_ns`` are
optional. Arrivals are absolute ns on the trace's clock (after alignment: the reference rank's,
rank 0), like its timestamps; the step annotations of ``asaptrace synth`` carry them so.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import polars as pl

from asaptrace.errors import UsageError
from asaptrace.schema import BATCHES_SCHEMA
from asaptrace.userfiles import read_text


@cache
def _schema() -> dict[str, pl.DataType]:
    """The batches table's polars schema, read from its Arrow schema when first needed (converting
    at import time made every command pay for pandas, which polars' converter imports: ≈ 0.5 s)."""
    return dict(pl.from_arrow(BATCHES_SCHEMA.empty_table()).schema)  # type: ignore[union-attr]


def empty_batches() -> pl.DataFrame:
    return pl.DataFrame(schema=_schema())


def _is_int64(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63


def _rows_of(obj: dict[str, Any], where: str, path: Path) -> list[dict[str, Any]]:
    def need_int(key: str) -> int:
        v = obj.get(key)
        if not isinstance(v, int) or isinstance(v, bool):
            raise UsageError(f"{where}: '{key}' must be an integer", path=path)
        return v

    step, group = need_int("step"), need_int("dp_group")
    mb = obj.get("micro_batch")
    if "seq_lens" in obj:
        lens = obj["seq_lens"]
        if not isinstance(lens, list) or not all(_is_int64(v) and v >= 0 for v in lens):
            raise UsageError(f"{where}: 'seq_lens' must be a list of non-negative integers", path=path)
        ids = obj.get("request_ids") or [None] * len(lens)
        cached = obj.get("cached_lens") or [None] * len(lens)
        arrivals = obj.get("arrivals_ns") or [None] * len(lens)
        if not all(isinstance(x, list) for x in (ids, cached, arrivals)) or not (
            len(ids) == len(cached) == len(arrivals) == len(lens)
        ):
            raise UsageError(
                f"{where}: 'request_ids'/'cached_lens'/'arrivals_ns' must be lists of as many items as 'seq_lens'",
                path=path,
            )
        if not all(a is None or _is_int64(a) for a in arrivals):
            raise UsageError(f"{where}: 'arrivals_ns' must be a list of integers (ns)", path=path)
        return [
            {
                "step": step,
                "dp_group": group,
                "micro_batch": mb,
                "request_id": None if i is None else str(i),
                "seq_len": s,
                "cached_len": c,
                "arrival_ns": a,
            }
            for s, i, c, a in zip(lens, ids, cached, arrivals, strict=True)
        ]
    seq = obj.get("seq_len")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise UsageError(
            f"{where}: needs 'seq_len' (a non-negative integer) or 'seq_lens' (a list)", path=path
        )
    rid = obj.get("request_id")
    return [
        {
            "step": step,
            "dp_group": group,
            "micro_batch": mb,
            "request_id": None if rid is None else str(rid),
            "seq_len": seq,
            "cached_len": obj.get("cached_len"),
            "arrival_ns": obj.get("arrival_ns"),
        }
    ]


def read_batches_sidecar(path: str | Path) -> pl.DataFrame:
    """Read a ``batches.jsonl`` sidecar; a bad line is one error naming the file and line."""
    path = Path(path)
    lines = read_text(path, "batches file").splitlines()
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise UsageError(f"line {n}: not JSON ({err.msg})", path=path) from None
        if not isinstance(obj, dict):
            raise UsageError(f"line {n}: expected a JSON object", path=path)
        rows.extend(_rows_of(obj, f"line {n}", path))
    if not rows:
        raise UsageError("no batches in the file", path=path)
    try:
        return pl.DataFrame(rows, schema=_schema(), orient="row")
    except (TypeError, pl.exceptions.PolarsError) as err:
        raise UsageError(f"a field has the wrong type ({err})", path=path) from None


def batches_from_annotations(spans: pl.DataFrame, args: pl.DataFrame) -> pl.DataFrame:
    """Batches written in step-span args (one copy per (step, dp_group) is kept)."""
    steps = spans.filter(pl.col("is_step_span") & pl.col("own_step").is_not_null()).select(
        "rank", "eid", "own_step"
    )
    if steps.height == 0:
        return empty_batches()
    with_args = steps.join(args.select("rank", "eid", "extra"), on=["rank", "eid"], how="inner").filter(
        pl.col("extra").str.contains("seq_lens")
    )
    seen: set[tuple[int, int]] = set()
    rows: list[dict[str, Any]] = []
    for r in with_args.sort("own_step", "rank").iter_rows(named=True):
        try:
            obj = json.loads(r["extra"])
        except json.JSONDecodeError:
            continue
        if not isinstance(obj.get("dp_group"), int) or not isinstance(obj.get("seq_lens"), list):
            continue
        key = (int(r["own_step"]), obj["dp_group"])
        if key in seen:
            continue
        seen.add(key)
        obj = {**obj, "step": int(r["own_step"])}
        try:
            rows.extend(_rows_of(obj, f"rank {r['rank']} step {key[0]}", Path("annotations")))
        except UsageError:
            continue
    return pl.DataFrame(rows, schema=_schema(), orient="row") if rows else empty_batches()


def annotated_dp_groups(spans: pl.DataFrame, args: pl.DataFrame) -> pl.DataFrame:
    """Per rank, the dp_group its step spans name (the most frequent one)."""
    steps = spans.filter(pl.col("is_step_span")).select("rank", "eid")
    if steps.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "dp_group": pl.Int32})
    got = (
        steps.join(args.select("rank", "eid", "extra"), on=["rank", "eid"], how="inner")
        .filter(pl.col("extra").is_not_null())
        .select(
            "rank",
            pl.col("extra").str.json_decode(pl.Struct({"dp_group": pl.Int64})).struct.field("dp_group"),
        )
    )
    got = got.filter(pl.col("dp_group").is_not_null())
    if got.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "dp_group": pl.Int32})
    return got.group_by("rank").agg(pl.col("dp_group").mode().first().cast(pl.Int32))
