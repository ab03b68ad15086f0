"""Results as files for pandas, duckdb, a spreadsheet: ``--csv DIR`` / ``--parquet DIR``.

Each result's module builds its flat tables (``replay_tables``, ``sweep_tables``, ``compare_tables``,
``advice_tables``: one row per thing a user would filter or join on; docs/reference/tables.md lists
every table and column, tests/test_results_tables.py checks each against the JSON it came from).
:func:`write_tables` writes them all or nothing (:func:`~asaptrace.userfiles.write_folder_files`), so a
full disk or a bad path leaves no half-written folder behind.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import polars as pl

from asaptrace.errors import UsageError
from asaptrace.userfiles import check_output_dir, write_folder_files

FORMATS = ("csv", "parquet")


def check_tables_target(folder: str | Path | None, fmt: str) -> Path | None:
    """Check ``--csv`` / ``--parquet`` before the work (a bad folder is named before, not after)."""
    if folder is None:
        return None
    if fmt not in FORMATS:
        raise UsageError(f"tables are written as {' or '.join(FORMATS)}, not {fmt!r}")
    return check_output_dir(folder, what=f"folder of {fmt} tables")


def write_tables(tables: dict[str, pl.DataFrame], folder: str | Path, fmt: str = "csv") -> list[Path]:
    """Write ``folder/<name>.<fmt>`` for every table, all or nothing
    (:func:`~asaptrace.userfiles.write_folder_files`: a full disk leaves nothing new behind)."""
    target = check_tables_target(folder, fmt)
    assert target is not None
    return write_folder_files(target, {f"{name}.{fmt}": _encoder(t, fmt) for name, t in tables.items()})


def _encoder(table: pl.DataFrame, fmt: str) -> Callable[[], bytes]:
    def encode() -> bytes:
        if fmt == "csv":
            return table.write_csv().encode()
        buf = io.BytesIO()
        table.write_parquet(buf)
        return buf.getvalue()

    return encode
