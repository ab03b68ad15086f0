"""Kineto events → per-event columns: the shape both decoders fill, and the msgspec decoder.

:class:`EventColumns` is all the Kineto reader's shared downstream (phases, B/E matching,
rejections, tables) sees of a file. :func:`decode_python` fills it from msgspec structs — the path
used when the C scanner is not built, is switched off, or declines a file — and
``_kineto_cscan.decode_c`` fills it from the C scanner's buffers. Both apply the same per-value
rules (:func:`~asaptrace.ingest.columns.one_ns`, :func:`~asaptrace.ingest.columns.one_int`,
:func:`~asaptrace.ingest.columns.id_map`), so a file reads the same whichever path runs.

The msgspec path decodes the whole file into typed structs (≈ 1 µs per event). When some event has
the wrong shape (``args`` not an object, an element that is not an object, a number out of
float range), it re-reads the file leniently: each event is decoded on its own from its raw JSON
text and a bad one is rejected with a reason instead of failing the file.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.errors import CorruptTrace
from asaptrace.ingest import columns as col

NO_EVENTS_LIST = "JSON object has no 'traceEvents' list"
TOO_DEEP = "invalid JSON (nested too deeply)"
HEADER_KEYS = ("distributedInfo", "baseTimeNanoseconds", "displayTimeUnit", "deviceProperties")

_NO_RAW = msgspec.Raw(b"")


class EventArgs(msgspec.Struct, gc=False):
    """The arguments we keep; every other key is skipped by the decoder."""

    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    in_split: Any = msgspec.field(default=None, name="In split size")
    out_split: Any = msgspec.field(default=None, name="Out split size")
    # shapes stay raw JSON text: no Python objects are built for them (they are on every cpu_op)
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    # metadata events
    name: Any = None
    labels: Any = None
    # step / layer annotations (asaptrace synth writes these; serving engines may too)
    step: Any = None
    layer: Any = None
    micro_batch: Any = None
    dp_group: Any = None
    seq_lens: Any = None
    cached_lens: Any = None
    request_ids: Any = None
    arrivals_ns: Any = None
    # a CUDA event wait (cuda_sync records): the cudaEventRecord it waits on, and that event's stream
    wait_on_stream: Any = None
    wait_on_cuda_event_record_corr_id: Any = None


#: Args without any key we keep (shared: nothing downstream mutates args).
EMPTY_ARGS = EventArgs()


def is_rich(a: EventArgs | None) -> bool:
    """Args that make a full row of the args table (collective metadata or step/layer annotations).

    The C scanner flags a superset of these (the key is present, whatever its value); this is the
    exact test both paths apply.
    """
    return a is not None and (
        a.collective is not None
        or a.in_nelems is not None
        or a.pg_ranks is not None
        or a.step is not None
        or a.layer is not None
        or a.seq_lens is not None
        or a.dp_group is not None
        or a.micro_batch is not None
        or a.wait_on_cuda_event_record_corr_id is not None
    )


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    id: Any = None
    args: EventArgs | None = None


class _Trace(msgspec.Struct):  # field names are the file's keys
    traceEvents: list[_Event] | None = None
    distributedInfo: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    deviceProperties: Any = None


class _RawTrace(msgspec.Struct):
    """The lenient reading: every part kept as raw JSON text, decoded piece by piece."""

    traceEvents: msgspec.Raw = _NO_RAW
    distributedInfo: msgspec.Raw = _NO_RAW
    displayTimeUnit: msgspec.Raw = _NO_RAW
    baseTimeNanoseconds: msgspec.Raw = _NO_RAW
    deviceProperties: msgspec.Raw = _NO_RAW


_trace_decoder = msgspec.json.Decoder(_Trace)
_list_decoder = msgspec.json.Decoder(list[_Event])
_raw_trace_decoder = msgspec.json.Decoder(_RawTrace)
_raw_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_event_decoder = msgspec.json.Decoder(_Event)
# float_hook=float: a number beyond float range reads as ±inf (an unusable value) instead of
# failing the whole decode; used wherever single values or events are decoded on their own.
_event_decoder_inf = msgspec.json.Decoder(_Event, float_hook=float)
ARGS_LIST_DECODER = msgspec.json.Decoder(list[EventArgs], float_hook=float)
VALUE_DECODER = msgspec.json.Decoder(float_hook=float)

_NON_SPACE = re.compile(rb"[^ \t\n\r\x0b\x0c]")


def first_char(data: bytes) -> bytes:
    """The first non-whitespace byte (b"" for a blank document), without copying the data."""
    m = _NON_SPACE.search(data)
    return m.group() if m else b""


@dataclass(frozen=True)
class IdColumn:
    """A pid or tid column: mapped int32 ids, the source value → id table, and where it is absent."""

    ids: np.ndarray
    table: dict[Any, int]
    missing: np.ndarray

    @classmethod
    def of(cls, ids: np.ndarray, table: dict[Any, int]) -> IdColumn:
        missing = ids == table[None] if None in table else np.zeros(len(ids), bool)
        return cls(ids, table, missing)


@dataclass(frozen=True)
class Times:
    """An int64 column as numpy: values (0 where invalid) and where they are valid."""

    values: np.ndarray
    valid: np.ndarray

    @classmethod
    def of(cls, arr: pa.Array) -> Times:
        return cls(
            arr.fill_null(0).to_numpy(zero_copy_only=False), arr.is_valid().to_numpy(zero_copy_only=False)
        )

    def arrow(self) -> pa.Array:
        return pa.array(self.values) if self.valid.all() else pa.array(self.values, mask=~self.valid)


@dataclass
class EventColumns:
    """One file's events as columns (one row per object event, in file order).

    ``ph``/``name``/``cat`` are dictionary strings (null where the value is not a string);
    ``ts``/``dur`` int64 ns, invalid where absent or unusable (``baseTimeNanoseconds`` not yet added).
    Fields only a few rows need are functions of the rows (numpy int64 positions) that want them.
    """

    decoder: str  # "c" or "msgspec": which path read the file
    n_read: int  # elements of traceEvents, including rejected ones
    rejected: Counter[str]  # events rejected while decoding (not objects, malformed args)
    header: dict[str, Any]  # the top-level values of HEADER_KEYS (None when absent)
    ph: pa.DictionaryArray
    name: pa.DictionaryArray
    cat: pa.DictionaryArray
    ts: Times
    dur: Times
    pid: IdColumn
    tid: IdColumn
    corr: Callable[[np.ndarray], pa.Array]  # args.correlation (int64, null when not an int)
    external_id: Callable[[np.ndarray], pa.Array]  # args["External id"], the same way
    flow_ids: Callable[[np.ndarray], pa.Array]  # str(id), null when absent
    args: Callable[[np.ndarray], list[EventArgs | None]]
    rich_candidates: Callable[[np.ndarray], np.ndarray]  # positions whose args may be rich
    has_dims: Callable[[np.ndarray], np.ndarray]  # bool: args has "Input Dims"
    shape_texts: Callable[[np.ndarray], tuple[pa.Array, pa.Array]]  # raw "Input Dims", "Input type" text

    @property
    def n(self) -> int:
        return len(self.ph)


def decode_python(data: bytes, path: Path) -> EventColumns:
    """Decode with msgspec (typed structs, or the lenient per-event reading) into columns."""
    events, rejected, n_read, header = _decode(data, path)
    return _columns_of(events, rejected, n_read, header)


def _decode(data: bytes, path: Path) -> tuple[list[_Event], Counter[str], int, dict[str, Any]]:
    """The events, the rejections while decoding, the number of elements read, and the header."""
    is_list = first_char(data) == b"["
    try:
        if is_list:
            events = _list_decoder.decode(data)
            return events, Counter(), len(events), dict.fromkeys(HEADER_KEYS)
        trace = _trace_decoder.decode(data)
        if trace.traceEvents is None:
            raise CorruptTrace(NO_EVENTS_LIST, path=path)
        header = {k: getattr(trace, k) for k in HEADER_KEYS}
        return trace.traceEvents, Counter(), len(trace.traceEvents), header
    except msgspec.ValidationError:
        pass  # some event has the wrong shape: go through the lenient path below
    except msgspec.DecodeError as err:
        raise CorruptTrace(f"invalid JSON ({_short(err)})", path=path) from None
    except RecursionError:
        raise CorruptTrace(TOO_DEEP, path=path) from None
    return _decode_lenient(data, path, is_list)


def _decode_lenient(
    data: bytes, path: Path, is_list: bool
) -> tuple[list[_Event], Counter[str], int, dict[str, Any]]:
    try:
        header: dict[str, Any] = dict.fromkeys(HEADER_KEYS)
        if is_list:
            raws = _raw_list_decoder.decode(data)
        else:
            try:
                raw = _raw_trace_decoder.decode(data)
                raws = _raw_list_decoder.decode(raw.traceEvents) if len(raw.traceEvents) else None
            except msgspec.ValidationError:  # not an object, or traceEvents not a list
                raws = None
            if raws is None:
                raise CorruptTrace(NO_EVENTS_LIST, path=path)
            header = {k: decode_value(getattr(raw, k)) for k in HEADER_KEYS}
    except msgspec.DecodeError as err:
        raise CorruptTrace(f"invalid JSON ({_short(err)})", path=path) from None
    except RecursionError:
        raise CorruptTrace(TOO_DEEP, path=path) from None
    rejected: Counter[str] = Counter()
    good: list[_Event] = []
    try:  # the typed decode stopped at the first bad shape: what follows may still be invalid
        for r in raws:
            ev = _lenient_event(r)
            if isinstance(ev, str):
                rejected[ev] += 1
            else:
                good.append(ev)
    except msgspec.DecodeError as err:
        raise CorruptTrace(f"invalid JSON ({_short(err)})", path=path) from None
    return good, rejected, len(raws), header


def _lenient_event(raw: msgspec.Raw) -> _Event | str:
    """One event decoded on its own, or the reason it is rejected."""
    for decoder in (_event_decoder, _event_decoder_inf):
        try:
            return decoder.decode(raw)
        except msgspec.ValidationError:
            pass
    text = bytes(raw)
    if text[:1] != b"{":
        return "not_an_object"
    # msgspec checks every "args" of the event (a key may repeat): any that is not an object or
    # null is malformed; if all are fine, what failed is an integer too long to convert
    pairs = json.loads(
        text.decode("utf-8", "surrogateescape"),
        object_pairs_hook=_Object,
        parse_int=len,
        parse_float=len,
        parse_constant=len,
    )
    return (
        "malformed_args"
        if any(k == "args" and not (v is None or isinstance(v, _Object)) for k, v in pairs)
        else "number_out_of_range"
    )


class _Object(list):
    """A JSON object as its (key, value) pairs, repeated keys included."""


def decode_value(raw: bytes | memoryview | msgspec.Raw) -> Any:
    """One JSON value (None when empty); a number beyond range reads as ±inf or None, never fails."""
    if not len(raw):
        return None
    try:
        return VALUE_DECODER.decode(raw)
    except msgspec.ValidationError:
        return None


def _short(err: Exception) -> str:
    msg = str(err)
    return "input is truncated" if "truncated" in msg.lower() else msg


def raw_texts(raws: list[msgspec.Raw]) -> pa.Array:
    """Raw JSON spans → a string array without a Python object per value (empty span → null)."""
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    offsets = np.zeros(len(raws) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(raws)
    arr = pa.LargeStringArray.from_buffers(len(raws), pa.py_buffer(offsets), pa.py_buffer(data))
    arr = arr.cast(pa.string())
    if (lengths == 0).any():
        arr = pc.if_else(pa.array(lengths == 0), pa.scalar(None, pa.string()), arr)
    return arr


def _columns_of(
    events: list[_Event], rejected: Counter[str], n_read: int, header: dict[str, Any]
) -> EventColumns:
    args_list = [e.args for e in events]

    def arg_ints(rows: np.ndarray, field: str) -> pa.Array:
        return col.int_values(
            [getattr(a, field) if (a := args_list[i]) is not None else None for i in rows.tolist()]
        )

    def flow_ids(rows: np.ndarray) -> pa.Array:
        return pa.array([None if (v := events[i].id) is None else str(v) for i in rows.tolist()], pa.string())

    def args(rows: np.ndarray) -> list[EventArgs | None]:
        return [args_list[i] for i in rows.tolist()]

    def rich_candidates(rows: np.ndarray) -> np.ndarray:
        return np.array([j for j, i in enumerate(rows.tolist()) if args_list[i] is not None], np.int64)

    def has_dims(rows: np.ndarray) -> np.ndarray:
        return np.array([(a := args_list[i]) is not None and bool(a.input_dims) for i in rows.tolist()], bool)

    def shape_texts(rows: np.ndarray) -> tuple[pa.Array, pa.Array]:
        sel = [args_list[i] or EMPTY_ARGS for i in rows.tolist()]
        return raw_texts([a.input_dims for a in sel]), raw_texts([a.input_type for a in sel])

    return EventColumns(
        decoder="msgspec",
        n_read=n_read,
        rejected=rejected,
        header=header,
        ph=col.dict_strings([e.ph for e in events]),
        name=col.dict_strings([e.name for e in events]),
        cat=col.dict_strings([e.cat for e in events]),
        ts=Times.of(col.to_ns([e.ts for e in events])),
        dur=Times.of(col.to_ns([e.dur for e in events])),
        pid=IdColumn.of(*col.id_map([e.pid for e in events])),
        tid=IdColumn.of(*col.id_map([e.tid for e in events])),
        corr=lambda rows: arg_ints(rows, "correlation"),
        external_id=lambda rows: arg_ints(rows, "external_id"),
        flow_ids=flow_ids,
        args=args,
        rich_candidates=rich_candidates,
        has_dims=has_dims,
        shape_texts=shape_texts,
    )
