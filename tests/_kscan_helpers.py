"""Running the Kineto reader through each of its decoders: the C scanner and msgspec.

Import ``kineto_decoder`` into a test module to run each of its tests once per decoder::

    from tests._kscan_helpers import kineto_decoder  # noqa: F401  (autouse: every test, both decoders)

The fixture is module-scoped (pytest groups the tests by decoder) and selects the decoder the way a
user does, with ``ASAPTRACE_NO_CSCAN``; the C variant is skipped when the extension is not built.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from asaptrace.ingest.kineto import cscan as _kineto_cscan
from asaptrace.ingest.kineto import reader as kineto

DECODERS = ("c", "msgspec")


@pytest.fixture(params=DECODERS, scope="module", autouse=True)
def kineto_decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "c" and not _kineto_cscan.available():
        pytest.skip(
            "the C scanner asaptrace.ingest.kineto._kscan is not built (no compiler at install time?)"
        )
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "msgspec":
            mp.setenv("ASAPTRACE_NO_CSCAN", "1")
        else:
            mp.delenv("ASAPTRACE_NO_CSCAN", raising=False)
        assert kineto.c_scanner_enabled() == (request.param == "c")
        yield request.param


def plain(table: pa.Table) -> list[dict]:
    """Rows with dictionary columns decoded: two decoders build different dictionaries for the
    same values, and only the values matter."""
    cols = {
        name: (col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col)
        for name, col in zip(table.column_names, table.columns, strict=True)
    }
    return pa.table(cols).to_pylist()
