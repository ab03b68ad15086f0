"""Column builders shared by the JSON ingesters: Python lists in, validated Arrow arrays out.

Each builder takes the values decoded for one field of every event and returns an Arrow array with
nulls where a value is missing or unusable, so the ingester can turn "unusable" into a counted
rejection. The fast path hands the whole list to Arrow; only when that fails (mixed types, strings)
does a per-value Python loop run.

The per-value rules (:func:`one_ns`, :func:`one_int`, :func:`id_map`'s order of ids) are the
definition: the vectorised paths give the same result, and the Kineto reader's C scanner applies
them itself to the values it converts and hands the others to these functions, so both of its
decoders read a file alike.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec
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


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_TWO63 = 2.0**63
_INT64 = pa.int64()
_INT64_INFO = np.iinfo(np.int64)


def one_ns(v: Any, scale: int = 1000) -> int | None:
    """One time value in µs (int, float or numeric string) → int ns; None when missing or unusable.

    The rule every decoder follows (the C scanner converts the common forms itself, exactly, and
    hands the rest to this function): ints and strings convert exactly (strings through Decimal,
    rounded half to even), floats to float64 precision; values outside int64 are unusable.
    """
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        ns = v * scale
    elif isinstance(v, float):
        x = v * scale
        if x != x or not -_TWO63 <= x < _TWO63:  # NaN, infinite, or beyond int64
            return None
        ns = round(x)
    elif isinstance(v, str):
        try:
            d = Decimal(v.strip())
        except (InvalidOperation, ValueError):
            return None
        if not d.is_finite() or d.adjusted() > 30:  # checked before any arithmetic on a huge exponent
            return None
        ns = 0 if d.adjusted() < -30 else int((d * scale).to_integral_value())
    else:
        return None
    return ns if INT64_MIN <= ns <= INT64_MAX else None


def to_ns(values: list[Any], *, scale: int = 1000) -> pa.Array:
    """Times in µs (int, float or numeric string) → int64 ns; null where missing or not a number.

    Vectorised where Arrow can do it; the result is always what :func:`one_ns` gives value by value
    (a list mixing floats with ints or bools goes value by value: large ints stay exact, and Arrow
    would read a bool as 0 or 1).
    """
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        arr = None
    if arr is not None:
        if pa.types.is_integer(arr.type):
            try:
                return pc.multiply_checked(arr.cast(pa.int64()), scale)
            except pa.ArrowInvalid:  # beyond int64: those values become null below
                pass
        elif pa.types.is_floating(arr.type) and all(type(v) is float or v is None for v in values):
            x = pc.multiply(arr, float(scale))
            ok = pc.and_(pc.is_finite(x), pc.and_(pc.greater_equal(x, -_TWO63), pc.less(x, _TWO63)))
            return pc.if_else(ok, pc.round(x), None).cast(pa.int64())
        elif pa.types.is_null(arr.type):
            return pa.nulls(len(values), pa.int64())
    return pa.array([one_ns(v, scale) for v in values], pa.int64())


def _int_info(typ: pa.DataType) -> np.iinfo:
    return np.iinfo(f"{'u' if pa.types.is_unsigned_integer(typ) else ''}int{typ.bit_width}")


def one_int(v: Any, info: np.iinfo | None = None) -> int | None:
    """One integer field value: an int (not a bool), or a string of decimal digits; else None."""
    info = info or _INT64_INFO
    if isinstance(v, bool):
        return None
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        try:
            v = int(v)
        except ValueError:  # "--5": isdigit() after lstrip, but not an int
            return None
    if isinstance(v, int):
        return v if info.min <= v <= info.max else None
    return None


def int_values(values: list[Any], typ: pa.DataType = _INT64) -> pa.Array:
    """Integers by :func:`one_int`, value by value (a float is null, never truncated); vectorised
    when every value is an int or None."""
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        arr = None
    if arr is not None:
        if pa.types.is_integer(arr.type):
            try:
                return arr.cast(typ)  # a safe cast: out of range raises
            except pa.ArrowInvalid:
                pass
        elif pa.types.is_null(arr.type):
            return pa.nulls(len(values), typ)
    info = _int_info(typ)
    return pa.array([one_int(v, info) for v in values], typ)


def ints(values: list[Any], typ: pa.DataType = _INT64) -> pa.Array:
    """Integers; anything else (or out of range for ``typ``) becomes null."""
    try:
        return pa.array(values, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    info = _int_info(typ)
    return pa.array([one_int(v, info) for v in values], typ)


def id_map(values: list[Any]) -> tuple[np.ndarray, dict[Any, int]]:
    """Map source pids/tids (int or str) to int32 ids: ints that fit keep their value, other values
    get fresh negative ids in order of first appearance. Returns the mapped array and the value → id
    table. (A list or dict value, which no real trace has, is keyed by its JSON text.)"""
    try:  # fast path: all ints (or None) → Arrow does the hashing
        arr = pa.array(values)
        if pa.types.is_integer(arr.type) or pa.types.is_null(arr.type):
            encoded = arr.cast(pa.int64()).dictionary_encode(null_encoding="encode")
            codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            return assign_ids(encoded.dictionary.to_pylist(), codes)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    uniq: dict[Any, int] = {}
    codes = np.fromiter(
        (uniq.setdefault(_hashable(v), len(uniq)) for v in values), dtype=np.int64, count=len(values)
    )
    return assign_ids(list(uniq), codes)


def _hashable(v: Any) -> Any:
    if isinstance(v, list | dict):
        return msgspec.json.encode(v).decode()
    return v


def assign_ids(keys: list[Any], codes: np.ndarray) -> tuple[np.ndarray, dict[Any, int]]:
    """Ids for distinct values ``keys`` (in order of first appearance) and each event's key index."""
    table: dict[Any, int] = {}
    used = {v for v in keys if isinstance(v, int) and not isinstance(v, bool) and INT32_MIN < v <= INT32_MAX}
    next_neg = -1
    for v in keys:
        if v in used and isinstance(v, int):
            table[v] = v
        else:
            while next_neg in used:
                next_neg -= 1
            table[v] = next_neg
            next_neg -= 1
    lookup = np.array([table[v] for v in keys], dtype=np.int32)
    return (lookup[codes] if len(codes) else np.zeros(0, np.int32)), table
