"""Helpers over the dictionary-encoded columns both Kineto decoders fill (``cat``, ``name``, ``ph``).

Why a module: the events table, the flows, the streams and the args tables all gather strings or
test membership by dictionary code (decided once per distinct string, not once per event), so these
few helpers are shared by every table builder of the reader.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


def dict_codes(arr: pa.DictionaryArray) -> np.ndarray:
    """Dictionary indices as numpy, -1 where null."""
    return arr.indices.fill_null(-1).to_numpy(zero_copy_only=False)


def strings_at(arr: pa.DictionaryArray, rows: np.ndarray) -> pa.Array:
    """Plain strings of the given rows (null where null): only those rows are materialised."""
    codes = dict_codes(arr)[rows]
    missing = codes < 0
    return arr.dictionary.take(pa.array(codes, mask=missing) if missing.any() else pa.array(codes))


def dict_mask(arr: pa.DictionaryArray, values: frozenset[str]) -> np.ndarray:
    """Membership decided once per dictionary entry (null → False)."""
    hit = np.array([v in values for v in arr.dictionary.to_pylist()] + [False], bool)
    return hit[dict_codes(arr)]


def text_of(v: Any) -> str | None:
    """A trace value as text: strings kept, None kept, anything else through ``str``."""
    return v if isinstance(v, str) else (None if v is None else str(v))
