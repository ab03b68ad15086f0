"""A big Kineto file read in pieces (asaptrace.ingest.kineto.pieces, .merge) is read as if whole.

The cut must fall only between two events of the ``traceEvents`` array — never inside a string
(escaped quotes, brackets and ``},{`` in names), a nested value, or the head and tail around the
array — and the joined columns must give the tables one read of the whole file gives: B/E pairs
across pieces, pid/tid ids in order of first appearance, the header's keys from head and tail.
Whatever does not fit the plan is read whole (the same answer, the same error message).
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from asaptrace.errors import CorruptTrace, SizeLimitExceeded
from asaptrace.ingest.kineto import cscan, pieces
from asaptrace.ingest.kineto.reader import read_kineto
from tests._kineto_helpers import cpu_op, gpu_process, kernel

pytestmark = pytest.mark.skipif(not cscan.available(), reason="the C scanner _kscan is not built")

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"

#: names a naive cut (at "},{", at a newline, at a bracket) would split inside the string
AWKWARD = [
    'a"},{"b',
    "back\\slash\\",
    'end with quote"',
    "[bracket]",
    "{brace},",
    "line\nbreak",
    "é ✓ \u2028",
]


def _events(n: int) -> list[dict]:
    out: list[dict] = []
    for i in range(n):
        name = AWKWARD[i % len(AWKWARD)] + str(i)
        out.append(
            kernel(name, 1000 + 10 * i, 5, corr=i, pid=0, tid=7 + i % 3, nested={"x": [1, {"y": "]},{"}]})
        )
    return out


def _doc(
    events: list[dict], *, head: dict | None = None, tail: dict | None = None, indent: int | None = None
) -> bytes:
    doc = {**(head or {"schemaVersion": 1}), "traceEvents": events, **(tail or {})}
    return json.dumps(doc, indent=indent, ensure_ascii=False).encode()


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_pieces_are_documents_holding_every_event_once(chunk, indent):
    events = _events(40)
    data = _doc(events, tail={"traceName": "x", "baseTimeNanoseconds": 5}, indent=indent)
    docs = list(pieces.documents(iter(_chunks(data, chunk)), piece_bytes=300))
    parsed = [json.loads(d) for d in docs]  # each piece is strict JSON of its own
    assert len(docs) > 5
    assert [e for p in parsed for e in p["traceEvents"]] == events  # in order, none split, none twice
    assert parsed[0]["schemaVersion"] == 1 and "traceName" not in parsed[0]  # the head in the first
    assert parsed[-1]["traceName"] == "x" and parsed[-1]["baseTimeNanoseconds"] == 5  # the tail in the last


def test_bare_list_is_cut_between_its_elements():
    events = _events(30)
    docs = list(pieces.documents(iter(_chunks(json.dumps(events).encode(), 50)), piece_bytes=200))
    assert len(docs) > 3
    assert [e for d in docs for e in json.loads(d)] == events


def test_a_short_document_is_one_piece_unchanged():
    data = _doc(_events(2))
    assert list(pieces.documents(iter([data]), piece_bytes=10**6)) == [data]


@pytest.mark.parametrize("piece", [1, 50, 300, 5000, 10**6])
@pytest.mark.parametrize(
    "data",
    [
        _doc(_events(40), tail={"traceName": "x", "baseTimeNanoseconds": 5}),
        _doc(_events(40), indent=2),
        json.dumps(_events(30)).encode(),
        b"  " + _doc(_events(3)) + b"\n",
    ],
    ids=["tail", "indented", "bare-list", "short"],
)
def test_a_plain_file_is_cut_into_the_pieces_of_its_chunks(tmp_path, data, piece):
    """A plain file read straight into reused buffers gives, byte for byte, the pieces the chunked
    read gives (the one gzip files take), and its buffers come back: read one piece at a time, two
    buffers serve every piece."""
    path = tmp_path / "t.json"
    path.write_bytes(data)
    buffers = set()

    def plain() -> list[bytes]:
        out = []
        for view, give_back in pieces.plain_documents(path, piece, max_bytes=2**40):
            out.append(bytes(view))
            buffers.add(id(view.obj))
            del view
            give_back()
        return out

    def outcome(read):  # the pieces, or why there are none (a head longer than two pieces)
        try:
            return read()
        except pieces.NotInPieces as e:
            return str(e)

    want = outcome(lambda: list(pieces.documents(iter(_chunks(data, piece)), piece_bytes=piece)))
    assert outcome(plain) == want
    assert len(buffers) <= 2


def test_a_bigger_file_gets_bigger_pieces_up_to_64_mib(monkeypatch):
    """About 32 pieces a file, between 32 and 64 MiB each (fewer chunks for the passes over a
    very big rank); ``ASAPTRACE_PIECE_MB`` wins when set."""
    from asaptrace.ingest.kineto import piece_bytes

    monkeypatch.delenv("ASAPTRACE_PIECE_MB", raising=False)
    mib = 1024**2
    assert piece_bytes() == 32 * mib
    assert piece_bytes(512 * mib) == 32 * mib
    assert piece_bytes(1536 * mib) == 48 * mib
    assert piece_bytes(4096 * mib) == 64 * mib
    monkeypatch.setenv("ASAPTRACE_PIECE_MB", "0.5")
    assert piece_bytes(4096 * mib) == mib // 2


def test_a_buffer_still_viewed_is_not_used_again():
    """A piece's buffer goes back for a later piece only once nothing views it: a view taken
    from the piece and kept (a slice of it, a memoryview of it) keeps the buffer out of the pool,
    so a later read can never write under it."""
    pool = pieces._Buffers(64)
    for keep in (lambda v: v[2:5], memoryview):
        buf = pool.get()
        buf[:5] = b"abcde"
        view, give_back = pool.lend(buf, 5)
        kept = keep(view)
        del view
        give_back()
        assert pool.get() is not buf  # a new buffer: the viewed one was not given back
        assert bytes(kept) in (b"cde", b"abcde")


def test_a_plain_file_over_the_cap_is_refused_by_name(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(_doc(_events(20)))
    with pytest.raises(SizeLimitExceeded, match="over the cap") as err:
        list(pieces.plain_documents(path, 100, max_bytes=1000))
    assert err.value.path == str(path)


def _python_walk(buf: bytes, in_string, escape, depth, level, min_gap, since):
    """``_kscan.walk`` as its docstring says it, byte by byte: the reference its vector loops are
    checked against."""
    cuts, end, i = [], -1, 0
    while i < len(buf):
        c = buf[i : i + 1]
        if in_string:
            if escape:
                escape = 0
            elif c == b"\\":
                escape = 1
            elif c == b'"':
                in_string = 0
        elif c == b'"':
            in_string = 1
        elif c in (b"{", b"["):
            depth += 1
        elif c in (b"}", b"]"):
            depth -= 1
            if depth < level:
                end = i
                break
        elif c == b"," and depth == level and since + i + 1 >= min_gap:
            cuts.append(i + 1)
            since = -(i + 1)
        i += 1
    return cuts, in_string, escape, depth, since + (end if end >= 0 else len(buf)), end


@pytest.mark.parametrize("seed", range(6))
def test_the_walk_agrees_with_a_byte_by_byte_walk(seed):
    """Strings of quotes, backslashes and brackets, 0–70 bytes (across the 16-byte loads of the
    walk's vector loop), the text cut into buffers at random bytes (inside strings and escapes),
    the state carried: the same cuts, states and end as the plain walk."""
    rng = random.Random(seed)
    events = [
        {"name": "".join(rng.choice('ab"\\{}[],:é ') for _ in range(rng.randrange(71))), "ts": i, "args": {}}
        for i in range(300)
    ]
    data = json.dumps({"traceEvents": events, "tail": 1}).encode()
    text = data[data.index(b"[") + 1 :]
    walker = cscan._kscan
    for _ in range(20):
        bounds = sorted(rng.sample(range(1, len(text)), 3))
        state = ref = (0, 0, 2, 2, rng.choice([1, 50, 700]), 0)
        for a, b in zip([0, *bounds], [*bounds, len(text)], strict=True):
            got = walker.walk(text[a:b], *state)
            want = _python_walk(text[a:b], *ref)
            assert (list(got[0]), *got[1:]) == want
            if got[5] >= 0:
                break
            state = ref = (got[1], got[2], got[3], 2, state[4], got[4])
        assert got[5] >= 0  # the events array's closing bracket found


def _write(path: Path, events: list[dict], gz: bool = False, **kw) -> Path:
    data = _doc(events, **kw)
    if gz:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _both(path: Path, monkeypatch, piece_bytes: int = 400):
    """(whole read, piecewise read) of ``path``, and how many pieces the piecewise read made."""
    monkeypatch.delenv("ASAPTRACE_PIECE_MB", raising=False)
    whole = read_kineto(path)
    n = len(pieces.read_in_pieces(path, max_bytes=2**40, piece_bytes=piece_bytes))
    monkeypatch.setenv("ASAPTRACE_PIECE_MB", str(piece_bytes / 1024**2))
    monkeypatch.setenv("ASAPTRACE_PIECEWISE_MB", "0")
    return whole, read_kineto(path), n


def _same(a, b) -> None:
    for name in ("events", "args", "flows", "streams"):
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.accounting == b.accounting
    assert a.rank_info == b.rank_info and a.notes == b.notes


@pytest.mark.parametrize("gz", [False, True])
def test_file_read_in_pieces_gives_the_tables_of_the_whole_read(tmp_path, monkeypatch, gz):
    # B in an early piece, its E many pieces later; string pids first met in a late piece; the
    # metadata naming the GPU process and baseTimeNanoseconds at the end of the file
    events = [{"ph": "B", "name": "step", "pid": "host", "tid": 1, "ts": 900}]
    events += _events(60)
    events += [cpu_op("late", 2000, 3, pid="worker-b", tid="t9"), cpu_op("later", 2100, 3, pid=-3, tid=-1)]
    events += [{"ph": "E", "name": "step", "pid": "host", "tid": 1, "ts": 5000}, *gpu_process(0)]
    path = _write(
        tmp_path / ("t.json.gz" if gz else "t.json"), events, gz=gz, tail={"baseTimeNanoseconds": 7}
    )
    whole, piecewise, n = _both(path, monkeypatch)
    assert n > 5
    _same(whole, piecewise)
    ev = piecewise.events.to_pylist()
    step = next(e for e in ev if e["name"] == "step")
    assert step["dur_ns"] == (5000 - 900) * 1000  # the pair across pieces: E.ts − B.ts
    assert step["ts_ns"] == 900 * 1000 + 7  # baseTimeNanoseconds from the tail added
    assert not any(piecewise.accounting.rejected.values())  # every event kept


def test_a_second_trace_events_key_is_read_whole_and_the_last_wins(tmp_path, monkeypatch):
    first, second = _events(30), _events(3)
    data = _doc(first)[:-1] + b', "traceEvents": ' + json.dumps(second).encode() + b"}"
    path = tmp_path / "twice.json"
    path.write_bytes(data)
    with pytest.raises(pieces.NotInPieces):
        pieces.read_in_pieces(path, max_bytes=2**40, piece_bytes=300)
    monkeypatch.setenv("ASAPTRACE_PIECE_MB", str(300 / 1024**2))
    monkeypatch.setenv("ASAPTRACE_PIECEWISE_MB", "0")
    assert read_kineto(path).events.num_rows == 3  # the second array, as a whole read gives


def test_a_nested_trace_events_key_before_the_real_one_is_not_taken_for_it(tmp_path, monkeypatch):
    data = _doc(_events(30), head={"meta": {"traceEvents": [kernel("decoy", 1, 1)]}})
    path = tmp_path / "nested.json"
    path.write_bytes(data)
    with pytest.raises(pieces.NotInPieces):
        pieces.read_in_pieces(path, max_bytes=2**40, piece_bytes=300)
    monkeypatch.setenv("ASAPTRACE_PIECE_MB", str(300 / 1024**2))
    monkeypatch.setenv("ASAPTRACE_PIECEWISE_MB", "0")
    names = read_kineto(path).events.column("name").to_pylist()
    assert len(names) == 30 and "decoy" not in names


def test_a_broken_piece_gives_the_whole_files_error(tmp_path, monkeypatch):
    data = _doc(_events(40))
    mid = data.index(b'"ts"', len(data) // 2)
    path = tmp_path / "broken.json"
    path.write_bytes(data[:mid] + b"@" + data[mid + 1 :])
    monkeypatch.delenv("ASAPTRACE_PIECE_MB", raising=False)
    with pytest.raises(CorruptTrace) as whole:
        read_kineto(path)
    monkeypatch.setenv("ASAPTRACE_PIECE_MB", str(300 / 1024**2))
    monkeypatch.setenv("ASAPTRACE_PIECEWISE_MB", "0")
    with pytest.raises(CorruptTrace) as piecewise:
        read_kineto(path)
    assert str(piecewise.value) == str(whole.value)  # the byte offset is the whole file's


def test_a_truncated_gzip_says_so(tmp_path, monkeypatch):
    raw = gzip.compress(_doc(_events(40)))
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: len(raw) // 2])
    monkeypatch.setenv("ASAPTRACE_PIECE_MB", str(300 / 1024**2))
    monkeypatch.setenv("ASAPTRACE_PIECEWISE_MB", "0")
    with pytest.raises(CorruptTrace, match="corrupt or truncated gzip stream"):
        read_kineto(path)


@pytest.mark.parametrize(
    "name",
    [
        "tracelens-serving/sglang_Qwen3-8B_prefilldecode.json.gz",
        "kineto-hta-samples/nccl_data.json.gz",
        "kineto-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json",
    ],
)
def test_real_traces_read_in_pieces_give_the_same_tables(monkeypatch, name):
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared/data folder beside the repository)")
    whole, piecewise, n = _both(path, monkeypatch, piece_bytes=64 * 1024)
    assert n > 2
    _same(whole, piecewise)


@pytest.mark.parametrize("second_key", [False, True])
def test_a_file_read_in_pieces_is_hashed_once_and_right(tmp_path, monkeypatch, second_key):
    # the reader hashes it as it reads it (the driver does not read it again); a file that falls
    # back to the whole read (a second traceEvents key) is hashed all the same
    import hashlib

    from asaptrace.ingest.driver import ingest_paths

    data = _doc(_events(40))
    if second_key:
        data = data[:-1] + b', "traceEvents": ' + json.dumps(_events(3)).encode() + b"}"
    path = tmp_path / "rank0.json"
    path.write_bytes(data)
    monkeypatch.setenv("ASAPTRACE_PIECE_MB", str(300 / 1024**2))
    monkeypatch.setenv("ASAPTRACE_PIECEWISE_MB", "0")
    store = ingest_paths([path], tmp_path / "out.store", jobs=1)
    assert [s["sha256"] for s in store.meta["sources"]] == [hashlib.sha256(data).hexdigest()]


def test_a_file_is_read_in_pieces_only_when_it_is_over_the_memory_budget(tmp_path, monkeypatch):
    # below the budget a file is read whole (its segmentation, not its read, is the peak: cutting
    # it would cost time for no memory); a gzip file counts at ten times its size on disk
    from asaptrace.ingest.base import IngestOptions

    monkeypatch.setenv("ASAPTRACE_PIECE_MB", str(300 / 1024**2))
    monkeypatch.delenv("ASAPTRACE_PIECEWISE_MB", raising=False)
    plain = _write(tmp_path / "t.json", _events(40))
    size = plain.stat().st_size
    assert pieces.in_pieces(plain, IngestOptions(piecewise_from=size - 1))
    assert not pieces.in_pieces(plain, IngestOptions(piecewise_from=size))
    gz = _write(tmp_path / "t.json.gz", _events(40), gz=True)
    on_disk = gz.stat().st_size
    assert pieces.in_pieces(gz, IngestOptions(piecewise_from=10 * on_disk - 1))
    assert not pieces.in_pieces(gz, IngestOptions(piecewise_from=10 * on_disk))
