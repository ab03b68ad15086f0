"""Column builders shared by the JSON ingesters: Python lists in, validated Arrow arrays out.

Each builder takes the values decoded for one field of every event and returns an Arrow array with
nulls where a value is missing or unusable, so the ingester can turn "unusable" into a counted
rejection. The fast path hands the whole list to Arrow; only when that fails (mixed types, strings)
does a per-value Python loop run.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of acyclic objects.

    Decoding a large trace allocates millions of containers; with the collector on, its passes
    make decoding super-linear in file size (4× the events took 6× the time before this).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def strings(values: list[Any]) -> pa.Array:
    """Strings; anything that is not a str becomes null."""
    try:
        return pa.array(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([v if isinstance(v, str) else None for v in values], pa.string())


def dict_strings(values: list[Any]) -> pa.DictionaryArray:
    """Dictionary-encoded strings (int32 indices); anything that is not a str becomes null.

    Hashing in a dict is cheaper than copying every (often long, highly repeated) kernel name into
    an Arrow string array first.
    """
    uniq: dict[Any, int] = {}
    try:
        codes = [uniq.setdefault(v, len(uniq)) for v in values]
    except TypeError:  # an unhashable value (list, dict): not a string anyway
        uniq = {}
        codes = [uniq.setdefault(v if isinstance(v, str) else None, len(uniq)) for v in values]
    keys = list(uniq)
    good = [isinstance(k, str) for k in keys]
    dictionary = pa.array([k if g else "" for k, g in zip(keys, good, strict=True)], pa.string())
    indices = pa.array(codes, pa.int32())
    if not all(good):
        bad_codes = pa.array([i for i, g in enumerate(good) if not g], pa.int32())
        indices = pc.if_else(pc.is_in(indices, bad_codes), pa.scalar(None, pa.int32()), indices)
    return pa.DictionaryArray.from_arrays(indices, dictionary)


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
    info = np.iinfo(f"{'u' if pa.types.is_unsigned_integer(typ) else ''}int{typ.bit_width}")
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
    try:  # fast path: all ints (or None) → Arrow does the hashing
        encoded = pa.array(values, pa.int64()).dictionary_encode()
        uniq = {v: i for i, v in enumerate(encoded.dictionary.to_pylist())}
        codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        if encoded.null_count:
            uniq[None] = len(uniq)
            codes[codes < 0] = uniq[None]
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        uniq = {}
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
