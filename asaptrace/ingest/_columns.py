"""Column builders shared by the JSON ingesters: Python lists in, validated Arrow arrays out.

Each builder takes the values decoded for one field of every event and returns an Arrow array with
nulls where a value is missing or unusable, so the ingester can turn "unusable" into a counted
rejection. The fast path hands the whole list to Arrow; only when that fails (mixed types, strings)
does a per-value Python loop run.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def strings(values: list[Any]) -> pa.Array:
    """Strings; anything that is not a str becomes null."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([v if isinstance(v, str) else None for v in values], pa.string())


def _one_ns(v: Any, scale: int) -> int | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v * scale
    if isinstance(v, float):
        return None if v != v or v in (float("inf"), float("-inf")) else round(v * scale)
    if isinstance(v, str):
        try:
            d = Decimal(v.strip())
        except InvalidOperation:
            return None
        if not d.is_finite():
            return None
        return int((d * scale).to_integral_value())
    return None


def to_ns(values: list[Any], *, scale: int = 1000) -> pa.Array:
    """Times in µs (int, float or numeric string) → int64 ns; null where missing or not a number.

    Integers and strings convert exactly; floats are exact to float64 precision.
    """
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        arr = None
    if arr is not None:
        if pa.types.is_integer(arr.type):
            return pc.multiply_checked(arr.cast(pa.int64()), scale)
        if pa.types.is_floating(arr.type):
            finite = pc.is_finite(arr)
            scaled = pc.round(pc.multiply(arr, float(scale)))
            return pc.if_else(finite, scaled, None).cast(pa.int64())
        if pa.types.is_null(arr.type):
            return pa.nulls(len(values), pa.int64())
    return pa.array([_one_ns(v, scale) for v in values], pa.int64())


def ints(values: list[Any], typ: pa.DataType = pa.int64()) -> pa.Array:
    """Integers; anything else (or out of range for ``typ``) becomes null."""
    try:
        return pa.array(values, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    info = np.iinfo(typ.to_pandas_dtype()) if pa.types.is_integer(typ) else None
    out = []
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and (info is None or info.min <= v <= info.max):
            out.append(v)
        elif isinstance(v, str) and v.strip().lstrip("-").isdigit():
            iv = int(v)
            out.append(iv if info is None or info.min <= iv <= info.max else None)
        else:
            out.append(None)
    return pa.array(out, typ)


def id_map(values: list[Any]) -> tuple[np.ndarray, dict[Any, int]]:
    """Map source pids/tids (int or str) to int32 ids: ints that fit keep their value, other values
    get fresh negative ids. Returns the mapped array and the value → id table."""
    uniq: dict[Any, int] = {}
    codes = np.fromiter((uniq.setdefault(v, len(uniq)) for v in values), dtype=np.int64, count=len(values))
    table: dict[Any, int] = {}
    used = {v for v in uniq if isinstance(v, int) and not isinstance(v, bool) and INT32_MIN < v <= INT32_MAX}
    next_neg = -1
    for v in uniq:
        if v in used and isinstance(v, int):
            table[v] = v
        else:
            while next_neg in used:
                next_neg -= 1
            table[v] = next_neg
            next_neg -= 1
    lookup = np.array([table[v] for v in uniq], dtype=np.int32)
    return (lookup[codes] if len(values) else np.zeros(0, np.int32)), table
