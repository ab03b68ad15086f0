"""docs/reference/columns.md lists exactly the columns (and dtypes) every Diagnosis table has."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from asaptrace.analyze.diagnosis import TABLE_NAMES
from asaptrace.pipeline import diagnose_store, enrich_store
from tests._analysis_helpers import ingest, moe_scenario, write_traces

DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "columns.md"
DTYPES = {
    pl.Int64: "int64",
    pl.Int32: "int32",
    pl.Int16: "int16",
    pl.Int8: "int8",
    pl.Float64: "float64",
    pl.String: "str",
    pl.Boolean: "bool",
}


def _documented() -> dict[str, list[tuple[str, str]]]:
    tables: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in DOC.read_text().splitlines():
        if m := re.match(r"^## `(\w+)`", line):
            current = tables.setdefault(m.group(1), [])
        elif (
            current is not None and (m := re.match(r"^\| (\w+) \| (\w+) \|", line)) and m.group(1) != "column"
        ):
            current.append((m.group(1), m.group(2)))
    return tables


@pytest.fixture(scope="module")
def diagnosis(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("docs")
    raw = ingest(write_traces(tmp / "t", moe_scenario(seq_lens={0: [1000, 1000], 1: [2000]})), tmp / "s")
    return diagnose_store(enrich_store(raw))


def test_every_table_is_documented_with_its_columns_and_dtypes(diagnosis):
    documented = _documented()
    assert set(documented) == set(TABLE_NAMES) == set(diagnosis.tables)
    for name, table in diagnosis.tables.items():
        actual = [(c, DTYPES[type(t)] if type(t) in DTYPES else str(t)) for c, t in table.schema.items()]
        assert actual == documented[name], name
