"""Round trip: ingest → store → re-read equals a direct, independent reading of the JSON.

Hypothesis generates traces mixing int, float and string times, int and string pids/tids, long
templated names, bare-list and object documents, plain and gzipped files. Every test runs once per
Kineto decoder (C scanner, msgspec).
"""

from __future__ import annotations

import gzip
import json
import tempfile
from collections import Counter
from decimal import Decimal
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asaptrace.ingest.driver import ingest_paths
from tests._kscan_helpers import kineto_decoder  # noqa: F401  (autouse: every test, both decoders)

names = st.one_of(
    st.sampled_from(
        [
            "aten::mm",
            "void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 4>>(Params)",
            "deep_ep::internode::dispatch<true, 8>",
            "ncclKernel_AllToAll",
        ]
    ),
    st.text(min_size=1, max_size=40),
)
micros = st.integers(min_value=0, max_value=2**40)
times = st.one_of(
    micros,
    micros.map(lambda v: v + 0.5),
    st.tuples(micros, st.integers(0, 999)).map(lambda t: f"{t[0]}.{t[1]:03d}"),
)
durations = st.one_of(
    st.integers(0, 10**6), st.integers(0, 10**6).map(lambda v: v / 4), st.integers(0, 10**6).map(str)
)
ids = st.one_of(st.integers(-5, 2**20), st.sampled_from(["Spans", "Traces", "stream 7"]))
event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "X", "X", "i"]),
        "name": names,
        "pid": ids,
        "tid": ids,
        "ts": times,
        "dur": durations,
        "cat": st.sampled_from(["kernel", "cpu_op", "gpu_memcpy", "user_annotation"]),
    }
)


def _ns(v) -> int:
    return int((Decimal(str(v) if not isinstance(v, float) else repr(v)) * 1000).to_integral_value())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(event, min_size=1, max_size=40), as_list=st.booleans(), gz=st.booleans())
def test_store_equals_direct_reading(events, as_list, gz):
    with tempfile.TemporaryDirectory() as d:
        doc = events if as_list else {"distributedInfo": {"rank": 3}, "traceEvents": events}
        data = json.dumps(doc).encode()
        path = Path(d) / ("rank-3.json.gz" if gz else "rank-3.json")
        path.write_bytes(gzip.compress(data) if gz else data)
        store = ingest_paths([path], Path(d) / "store", jobs=1)
        got = store.events().select(pl.col("name").cast(pl.String), "ts_ns", "dur_ns", "rank").collect()
        expected = (
            Counter(
                (e["name"], _ns(e["ts"]), 0 if e["ph"] == "i" else _ns(e["dur"]), 3)
                for e in json.loads(data)
                if isinstance(e, dict)
            )
            if as_list
            else Counter((e["name"], _ns(e["ts"]), 0 if e["ph"] == "i" else _ns(e["dur"]), 3) for e in events)
        )
        assert Counter(got.rows()) == expected
        acc = store.meta["accounting"]
        assert acc["read"] == acc["kept"] == len(events) and acc["rejected"] == {}
