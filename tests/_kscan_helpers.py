"""Running the Kineto reader through each of its decoders: the C scanner and msgspec.

Import ``kineto_decoder`` into a test module to run each of its tests once per decoder::

    from tests._kscan_helpers import kineto_decoder  # noqa: F401  (autouse: every test, every decoder)

The fixture is module-scoped (pytest groups the tests by decoder) and selects the decoder the way a
user does, with ``ASAPTRACE_NO_CSCAN``; the C variants are skipped when the extension is not built.
A third variant, ``c-pieces``, reads every file of more than 96 bytes the way a big file is read
(:mod:`asaptrace.ingest.kineto.pieces`: cut into pieces of 48 bytes, between every event or two),
so each hand-worked answer of those tests holds for the piecewise read too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from asaptrace.ingest.kineto import cscan as _kineto_cscan
from asaptrace.ingest.kineto import reader as kineto

DECODERS = ("c", "msgspec", "c-pieces")
PIECE_MB = str(48 / 1024**2)  # ASAPTRACE_PIECE_MB for 48-byte pieces


@pytest.fixture(params=DECODERS, scope="module", autouse=True)
def kineto_decoder(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param != "msgspec" and not _kineto_cscan.available():
        pytest.skip(
            "the C scanner asaptrace.ingest.kineto._kscan is not built (no compiler at install time?)"
        )
    with pytest.MonkeyPatch.context() as mp:
        if request.param == "msgspec":
            mp.setenv("ASAPTRACE_NO_CSCAN", "1")
        else:
            mp.delenv("ASAPTRACE_NO_CSCAN", raising=False)
        if request.param == "c-pieces":
            mp.setenv("ASAPTRACE_PIECE_MB", PIECE_MB)
            mp.setenv("ASAPTRACE_PIECEWISE_MB", "0")  # whatever the memory budget
        else:
            mp.delenv("ASAPTRACE_PIECE_MB", raising=False)
            mp.delenv("ASAPTRACE_PIECEWISE_MB", raising=False)
        assert kineto.c_scanner_enabled() == (request.param != "msgspec")
        yield request.param


def plain(table: pa.Table) -> list[dict]:
    """Rows with dictionary columns decoded: two decoders build different dictionaries for the
    same values, and only the values matter."""
    cols = {
        name: (col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col)
        for name, col in zip(table.column_names, table.columns, strict=True)
    }
    return pa.table(cols).to_pylist()
