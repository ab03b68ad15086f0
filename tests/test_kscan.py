"""The C scanner (``asaptrace.ingest.kineto._kscan``) against the msgspec decoder, and against bad input.

The Kineto reader's two decoders must agree event by event: on generated traces (escapes, unicode,
nested args, times as int / float / string / exponent, odd whitespace, duplicate keys, escaped
keys), on the real traces in ../shared/data, and on the errors malformed input raises. The scanner
parses untrusted files, so truncated, garbled and deeply nested input must raise, never crash.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import math
import tempfile
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from asaptrace.errors import CorruptTrace
from asaptrace.ingest.base import IngestResult
from asaptrace.ingest.kineto import cscan as _kineto_cscan
from asaptrace.ingest.kineto import read_kineto
from tests._kscan_helpers import plain

pytestmark = pytest.mark.skipif(not _kineto_cscan.available(), reason="the C scanner _kscan is not built")

if _kineto_cscan.available():
    from asaptrace.ingest.kineto._kscan import scan

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


# ------------------------------------------------------------------------------------------ helpers


def _read(path: Path, decoder: str) -> IngestResult | str:
    """read_kineto with one decoder; the error's one-line message when it refuses the file."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASAPTRACE_NO_CSCAN", "1" if decoder == "msgspec" else "0")
        try:
            return read_kineto(path)
        except CorruptTrace as err:
            return f"CorruptTrace: {err.message}"


def _assert_same(path: Path) -> IngestResult | str:
    """Both decoders give the same tables, accounting, rank and notes (or the same error)."""
    c, m = _read(path, "c"), _read(path, "msgspec")
    if isinstance(m, str) or isinstance(c, str):
        assert c == m
        return m
    for table in ("events", "args", "flows", "streams"):
        assert plain(getattr(c, table)) == plain(getattr(m, table)), table
    assert c.accounting == m.accounting
    assert (c.rank_info, c.notes) == (m.rank_info, m.notes)
    return c


def _decoder_used(data: bytes) -> str:
    """Which decoder read_kineto uses for these bytes (the scanner may decline a file)."""
    try:
        return "msgspec" if _kineto_cscan.decode_c(data, Path("x.json")) is None else "c"
    except CorruptTrace:  # the scanner read the file and found no traceEvents list
        return "c"


def _scan_one(event_json: str) -> dict:
    return scan(f'{{"traceEvents": [{event_json}]}}'.encode())


def _column(res: dict, field: str) -> tuple[int, int]:
    """(value, status) of a value field of the single event."""
    vals, status = res[field][:2]
    return int(np.frombuffer(vals, np.int64)[0]), int(np.frombuffer(status, np.uint8)[0])


# ------------------------------------------------------------------------- the scanner, by hand


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ('"1694128201435418.123"', 1_694_128_201_435_418_123),
        ("1694128201435418.123", 1_694_128_201_435_418_123),  # a JSON float, exact from its digits
        ('"0.0005"', 0),  # 0.5 ns: half to even → 0
        ('"0.0015"', 2),  # 1.5 ns → 2
        ('"0.0025"', 2),  # 2.5 ns → 2
        ('"-0.0015"', -2),
        ("1.0005", 1000),  # 1000.5 ns → 1000
        ("1.5e3", 1_500_000),
        ("15E-1", 1_500),
        ('" 12.5 "', 12_500),  # spaces around a string number, as Decimal(s.strip()) reads it
        ('"+7"', 7_000),
        ('".5"', 500),
        ('"5."', 5_000),
        ("-0", 0),
        ("9223372036854775", 9_223_372_036_854_775_000),  # the largest µs that fits int64 in ns
        ("0.00000000000000000000000000000000000000001", 0),
    ],
)
def test_times_convert_exactly_from_their_decimal_text(text, ns):
    assert _column(_scan_one(f'{{"ts": {text}}}'), "ts") == (ns, 1)


@pytest.mark.parametrize(
    "text",
    [
        "9223372036854776",
        '"1_000"',
        '"NaN"',
        '"abc"',
        "true",
        "[1]",
        "1e400",
        '"1.0000000000000000000000001"',
    ],
)
def test_times_the_scanner_cannot_convert_are_left_to_python(text):
    # int64 overflow, forms only Decimal reads, non-numbers, more digits than Decimal keeps exact
    assert _column(_scan_one(f'{{"ts": {text}}}'), "ts")[1] == 2


def test_strings_are_unescaped_and_dictionary_encoded():
    raw = r'"a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00"'
    res = scan(f'[{{"name": {raw}}}, {{"name": "plain"}}, {{"name": {raw}}}, {{"name": 5}}]'.encode())
    codes, (data, offsets) = res["name"]
    assert np.frombuffer(codes, np.int32).tolist() == [0, 1, 0, -1]  # -1: not a string
    offs = np.frombuffer(offsets, np.int64).tolist()
    assert [str(data[a:b], "utf-8") for a, b in pairwise(offs)] == ['a"b\\c/d\x08\x0c\n\r\té😀', "plain"]


def test_columns_are_the_scanners_own_memory_and_outlive_the_result():
    """The scanner hands its columns over without a copy: read-only views that keep their memory
    alive for as long as an array made from them (the result dict gone, the heap churned)."""
    res = scan(b'[{"ts": 1.5, "name": "a"}, {"ts": 2, "name": "b"}, {"ts": 7, "name": "a"}]')
    ts, codes = res["ts"][0], res["name"][0]
    assert isinstance(ts, memoryview) and ts.readonly
    arr = np.frombuffer(ts, np.int64)
    del res, ts
    gc.collect()
    junk = [bytes(4096) for _ in range(2000)]  # freed memory would be handed out again here
    assert arr.tolist() == [1_500, 2_000, 7_000] and np.frombuffer(codes, np.int32).tolist() == [0, 1, 0]
    with pytest.raises(ValueError):
        arr[0] = 0  # read-only: nothing writes into the scanner's memory
    del junk


def test_escaped_keys_match_and_the_last_duplicate_wins():
    res = _scan_one(r'{"p\u0068": "X", "ts": 1, "ts": 2, "pid": "a", "pid": 7}')
    assert np.frombuffer(res["ph"][0], np.int32).tolist() == [0] and res["ph"][1][0] == b"X"
    assert _column(res, "ts") == (2_000, 1)
    assert _column(res, "pid") == (7, 1)


def test_ids_are_ints_strings_or_left_to_python():
    res = scan(b'[{"pid": 5, "tid": "stream 7", "id": 1.5}, {"pid": null}]')
    pid, pid_status = (
        np.frombuffer(b, t).tolist() for b, t in zip(res["pid"][:2], (np.int64, np.uint8), strict=True)
    )
    assert pid_status == [1, 0] and pid[0] == 5
    assert _column(res, "tid") == (0, 3)  # code 0 in the tid dictionary
    assert _column(res, "id")[1] == 2  # a float id: Python applies str()


def test_header_spans_and_the_args_python_needs():
    doc = (
        b'{"displayTimeUnit": "ms", "traceEvents": [{"args": {"step": 1, "x": [1, {"y": 2}]}}, {"args": []}]}'
    )
    res = scan(doc)
    a, b = res["header"]["displayTimeUnit"]
    assert doc[a:b] == b'"ms"' and res["header"]["distributedInfo"] is None
    assert np.frombuffer(res["args_status"], np.uint8).tolist() == [1, 2]  # [] is not an object
    assert res["args_raw"][1] == b'[{"step": 1, "x": [1, {"y": 2}]}]'  # one JSON array, decoded in one call


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (b'{"traceEvents": [', "truncated"),
        (b'{"traceEvents": [{"ts": 1.}]}', "invalid number"),
        (b'{"traceEvents": [{"ts": 01}]}', "expected ',' or '}'"),
        (b'{"traceEvents": [{"ts": 1,}]}', "object keys must be strings"),
        (b'{"traceEvents": []} x', "trailing characters"),
        (b'["\\ud800"]', "surrogate"),
        (b'["\xff"]', "UTF-8"),
        (b'["a\x01"]', "invalid character in string"),
        (b"[" * 300 + b"]" * 300, "nested too deeply"),
    ],
)
def test_invalid_json_raises_value_error_naming_the_byte(doc, reason):
    with pytest.raises(ValueError, match=rf"^invalid JSON at byte \d+: .*{reason}"):
        scan(doc)


# ------------------------------------------------------------------------------ generated traces


@dataclass(frozen=True)
class Raw:
    """JSON text written as it is (numbers in forms json.dumps never writes)."""

    text: str


_chars = st.characters(blacklist_categories=("Cs",))  # no lone surrogates: they are not UTF-8
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(_chars, max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(_chars, max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
micros = st.integers(0, 2**40)
times = st.one_of(
    st.integers(-(10**6), 2**40),
    micros.map(lambda k: k / 1024),  # exactly representable; × 1000 can land on .5: half to even
    st.tuples(micros, st.integers(0, 999_999)).map(lambda t: f"{t[0]}.{t[1]}"),
    st.sampled_from(
        [" 12.5 ", "1e3", "+7", "-0", "1.5E+2", ".5", "5.", "1_000", "NaN", "abc", "", "Infinity"]
    ),
    st.sampled_from(
        [
            Raw("1.5E+2"),
            Raw("-0"),
            Raw("-0.0"),
            Raw("1e-400"),
            Raw("1e400"),
            Raw("2.5E-1"),
            Raw("12345678901234567890123"),
            Raw("9223372036854776"),
        ]
    ),
    st.none(),
    st.booleans(),
    st.just([1]),
)
ids = st.one_of(
    st.integers(-5, 2**20),
    st.integers(2**31, 2**40),
    st.sampled_from(["Spans", "Traces", "stream 7", "é"]),
    st.none(),
)
odd_ids = st.one_of(ids, st.sampled_from([1.0, 2.5, True, Raw("12345678901234567890123"), [1]]))
names = st.one_of(
    st.sampled_from(
        [
            "aten::mm",
            "ncclKernel_AllReduce",
            "void flash::flash_fwd_kernel<Traits<128, 64>>(Params)",
            "process_name",
            "thread_name",
            "process_labels",
        ]
    ),
    st.text(_chars, max_size=12),
    st.integers(),
)
cats = (
    st.sampled_from(
        [
            "kernel",
            "cpu_op",
            "cuda_runtime",
            "gpu_memcpy",
            "user_annotation",
            "gpu_user_annotation",
            "Kernel",
            "ac2g",
            "python_function",
        ]
    )
    | st.text(_chars, max_size=5)
    | st.none()
)
ints_or_text = st.one_of(
    st.integers(-(2**63), 2**63),
    st.sampled_from(["123", " 42 ", "--5", "x"]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
)
dims = st.recursive(st.integers(0, 10**4), lambda inner: st.lists(inner, max_size=3), max_leaves=6)
args_objects = st.fixed_dictionaries(
    {},
    optional={
        "correlation": ints_or_text,
        "External id": ints_or_text,
        "Input Dims": dims,
        "Input type": st.lists(st.sampled_from(["float", "c10::BFloat16", ""]), max_size=3),
        "Collective name": st.sampled_from(["allreduce", "all_to_all"]) | st.none(),
        "In msg nelems": ints_or_text,
        "Out msg nelems": ints_or_text,
        "Group size": st.integers(-(2**40), 2**40),
        "dtype": st.sampled_from(["Float", "BFloat16"]),
        "Process Group Ranks": st.sampled_from(["[0, 1]", [0, 1, 2]]),
        "In split size": st.lists(st.integers(0, 9), max_size=3),
        "step": st.integers(0, 9) | st.none(),
        "layer": st.integers(0, 60),
        "micro_batch": st.integers(0, 3),
        "seq_lens": st.lists(st.integers(1, 9000), max_size=4),
        "cached_lens": st.lists(st.integers(0, 900), max_size=4),
        "name": st.text(_chars, max_size=8) | st.integers(),
        "labels": st.sampled_from(["GPU 0", "CPU", "npu 3"]) | st.integers(),
        "other": json_values,
    },
)
events = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X"] * 6 + ["B", "E", "i", "I", "R", "s", "t", "f", "M", "C", "b", ""])
        | st.integers(),
        "name": names,
        "cat": cats,
        "pid": ids,
        "tid": ids,
        "ts": times,
        "dur": times,
        "id": st.integers(-5, 2**70) | st.text(_chars, max_size=4) | st.sampled_from([2.5, True]),
        "args": st.one_of(args_objects, args_objects, st.none(), st.sampled_from([[1], "x", 3])),
        "s": st.just("t"),
        "unknown key": json_values,
    },
)
elements = st.one_of(events, events, events, events, events, st.sampled_from([5, "x", None, [1, {"a": 2}]]))


@st.composite
def documents(draw, event_strategy=elements) -> bytes:
    """A trace as JSON text, written with random whitespace, escapes, and duplicate keys."""
    evs = draw(st.lists(event_strategy, max_size=25))
    if draw(st.booleans()):
        top: Any = evs
    else:
        header = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "schemaVersion": st.just(1),
                    "distributedInfo": st.fixed_dictionaries(
                        {"rank": st.integers(-1, 7) | st.text(max_size=2)}
                    ),
                    "baseTimeNanoseconds": st.sampled_from(
                        [1_700_000_000_000_000_000, 5, True, "7", 2**64, 1.5]
                    ),
                    "displayTimeUnit": st.sampled_from(["ms", "ns", 5]),
                    "deviceProperties": json_values,
                    "other": json_values,
                },
            )
        )
        top = dict(draw(st.permutations([*header.items(), ("traceEvents", evs)])))
    return _Writer(draw(st.randoms(use_true_random=False))).dump(top).encode()


class _Writer:
    """JSON text of a value with random whitespace, optional escapes (``\\/``, ``\\u0061``), raw
    UTF-8 or ASCII escapes, and now and then a duplicate key (the last one wins)."""

    WS = ("", "", " ", "\n", "\t", "\r\n  ")

    def __init__(self, rnd: Any) -> None:
        self.rnd = rnd

    def ws(self) -> str:
        return self.rnd.choice(self.WS)

    def string(self, s: str) -> str:
        text = json.dumps(s, ensure_ascii=self.rnd.random() < 0.5)
        if self.rnd.random() < 0.25 and "\\u" not in text:  # escapes json.dumps never writes
            text = text.replace("/", "\\/").replace("a", "\\u0061")
        return text

    def dump(self, v: Any) -> str:
        if isinstance(v, Raw):
            return v.text
        if isinstance(v, str):
            return self.string(v)
        if isinstance(v, dict):
            pairs = list(v.items())
            if pairs and self.rnd.random() < 0.2:
                dup = (self.rnd.choice(pairs)[0], self.rnd.choice([0, "dup", None, 1.5, {"step": 1}, []]))
                pairs.insert(self.rnd.randint(0, len(pairs)), dup)
            body = ",".join(
                f"{self.ws()}{self.string(k)}{self.ws()}:{self.ws()}{self.dump(x)}{self.ws()}"
                for k, x in pairs
            )
            return "{" + body + self.ws() + "}"
        if isinstance(v, list):
            return "[" + ",".join(self.ws() + self.dump(x) + self.ws() for x in v) + self.ws() + "]"
        return json.dumps(v)


def _write(d: str, data: bytes, gz: bool = False) -> Path:
    path = Path(d) / ("t.json.gz" if gz else "t.json")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(doc=documents())
def test_both_decoders_read_generated_traces_alike(doc):
    assert _decoder_used(doc) == "c"
    with tempfile.TemporaryDirectory() as d:
        _assert_same(_write(d, doc))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    doc=documents(
        st.fixed_dictionaries(
            {"ph": st.just("X"), "name": names, "pid": odd_ids, "tid": odd_ids, "ts": times, "dur": times}
        )
    )
)
def test_odd_pid_values_read_alike(doc):
    # floats, bools, lists and huge ints as pids go through the msgspec path's id_map, value by value
    with tempfile.TemporaryDirectory() as d:
        _assert_same(_write(d, doc))


# ---------------------------------------------------------------------------------- real traces


def _real_traces() -> list[Path]:
    return sorted(p for p in SHARED.glob("traces/kineto-*/*") if p.name.endswith((".json", ".json.gz")))


@pytest.mark.parametrize("path", _real_traces() or [None], ids=lambda p: p.name if p else "absent")
def test_real_traces_read_alike_and_times_are_exact(path):
    if path is None:
        pytest.skip(f"real traces not available: {SHARED} is absent")
    c, m = _read(path, "c"), _read(path, "msgspec")
    assert not isinstance(c, str) and not isinstance(m, str)
    assert c.accounting == m.accounting and (c.rank_info, c.notes) == (m.rank_info, m.notes)
    assert plain(c.args) == plain(m.args) and plain(c.streams) == plain(m.streams)
    ce, me = plain(c.events), plain(m.events)
    assert [{k: v for k, v in e.items() if k not in ("ts_ns", "dur_ns")} for e in ce] == [
        {k: v for k, v in e.items() if k not in ("ts_ns", "dur_ns")} for e in me
    ]
    # the C path converts each time from its decimal text: check against Decimal, independently
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    raw = doc["traceEvents"]
    base = doc.get("baseTimeNanoseconds") or 0
    n_exact = 0
    for ev_c, ev_m in zip(ce, me, strict=True):
        src = raw[ev_c["eid"]]
        if src.get("ph") == "X" and "ts" in src and "dur" in src:
            exact_ts = base + int((Decimal(str(src["ts"])) * 1000).to_integral_value(ROUND_HALF_EVEN))
            exact_dur = int((Decimal(str(src["dur"])) * 1000).to_integral_value(ROUND_HALF_EVEN))
            assert (ev_c["ts_ns"], ev_c["dur_ns"]) == (exact_ts, exact_dur)
            n_exact += 1
        # the msgspec path reads JSON floats through float64: within half an ulp of the µs value
        tol = 1 + math.ulp(float(src.get("ts", 0))) * 1000
        assert abs(ev_c["ts_ns"] - ev_m["ts_ns"]) <= tol and abs(ev_c["dur_ns"] - ev_m["dur_ns"]) <= 2 * tol
    assert n_exact > 0
    assert [{k: v for k, v in f.items() if k != "ts_ns"} for f in plain(c.flows)] == [
        {k: v for k, v in f.items() if k != "ts_ns"} for f in plain(m.flows)
    ]


# ------------------------------------------------------------------------------------ bad input


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(doc=documents(), cut=st.floats(0, 1, exclude_max=True))
def test_truncated_files_raise_the_same_one_line_error(doc, cut):
    doc = doc.rstrip()
    assume(len(doc) > 1)
    part = doc[: 1 + int(cut * (len(doc) - 1))]  # a proper prefix: the closing bracket is missing
    assume(part.strip())
    with pytest.raises(ValueError, match="truncated"):
        scan(part)
    with tempfile.TemporaryDirectory() as d:
        msg = _assert_same(_write(d, part))
    assert isinstance(msg, str) and msg.startswith("CorruptTrace: invalid JSON")


_mutations = st.lists(
    st.tuples(
        st.sampled_from(["set", "insert", "delete"]),
        st.floats(0, 1, exclude_max=True),
        st.sampled_from(list(b'{}[]",:\\ 0123456789.eE-+tfnul\x00\x1f\x7f\x80\xbf\xc3\xe2\xf0\xff')),
    ),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(doc=documents(), mutations=_mutations)
def test_garbled_files_never_crash_and_the_scanner_is_never_laxer_than_msgspec(doc, mutations):
    data = bytearray(doc)
    for op, where, byte in mutations:
        i = int(where * len(data)) if data else 0
        if op == "insert" or not data:
            data.insert(i, byte)
        elif op == "set":
            data[i] = byte
        else:
            del data[i]
    data = bytes(data)
    try:
        scan(data)
        accepted = True
    except ValueError:
        accepted = False
    if accepted:  # whatever the scanner accepts, msgspec parses too (it may only refuse a value's type)
        with contextlib.suppress(msgspec.ValidationError):
            msgspec.json.decode(data)
    with tempfile.TemporaryDirectory() as d:
        path = _write(d, data)
        c, m = _read(path, "c"), _read(path, "msgspec")
    assert isinstance(c, str) == isinstance(m, str)
    if isinstance(c, str):
        assert c == m
    else:
        assert c.accounting.read == m.accounting.read  # type: ignore[union-attr]


def test_random_bytes_never_crash():
    rng = np.random.default_rng(7)
    for n in (1, 2, 5, 17, 100, 1000):
        for _ in range(200):
            data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            with contextlib.suppress(ValueError):
                scan(data)
            with contextlib.suppress(ValueError):
                scan(b'{"traceEvents": [' + data)


def test_deep_nesting_is_refused_without_recursion(tmp_path):
    bomb = tmp_path / "bomb.json"
    bomb.write_bytes(b'{"traceEvents": [' + b"[" * 200_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        scan(bomb.read_bytes())
    assert _assert_same(bomb) == "CorruptTrace: invalid JSON (nested too deeply)"


def test_nesting_the_scanner_declines_is_read_by_msgspec(tmp_path):
    # 300 levels: over the scanner's cap (256), under msgspec's: msgspec reads the file
    deep = "[" * 300 + "]" * 300
    doc = (
        f'{{"traceEvents": [{{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {deep}}},'
        f'{{"ph": "X", "name": "ok", "pid": 1, "tid": 1, "ts": 1, "dur": 2, "args": {{"x": {deep}}}}}]}}'.encode()
    )
    assert _decoder_used(doc) == "msgspec"
    r = _assert_same(_write(str(tmp_path), doc))
    assert not isinstance(r, str)
    assert r.accounting.rejected == {"malformed_args": 1} and r.events.column("name").to_pylist() == ["ok"]


def test_huge_integers_are_read_by_msgspec(tmp_path):
    big = "9" * 700  # over the scanner's hand-over limit; Python ints take it
    doc = f'[{{"ph": "X", "name": "k", "pid": {big}, "tid": 1, "ts": 1, "dur": 2}}]'.encode()
    assert _decoder_used(doc) == "msgspec"
    r = _assert_same(_write(str(tmp_path), doc))
    assert not isinstance(r, str) and r.events.column("pid").to_pylist()[0] < 0  # a fresh id for a big value


@pytest.mark.parametrize(
    ("event", "same_error"),
    [
        (b'{"ph": "X", "name": "\xff"}', True),  # a kept string: msgspec refuses invalid UTF-8
        (b'{"ph": "X", "name": "\\ud800"}', True),  # a lone surrogate, anywhere
        (b'{"ph": "X", "name": "k", "other": "\xff"}', False),  # a skipped string: msgspec reads the file
        (b'{"ph": "X", "name": "k", "args": {"Input Dims": ["\xff"]}}', False),
    ],
)
def test_bad_strings_read_as_msgspec_reads_them(tmp_path, event, same_error):
    doc = b'{"traceEvents": [' + event + b"]}"
    with pytest.raises(ValueError):
        scan(doc)
    r = _assert_same(_write(str(tmp_path), doc))
    assert isinstance(r, str) == same_error
