"""Count polars queries: every ``LazyFrame.collect`` and every eager operation polars runs as a
query of its own (``DataFrame.filter``, ``join``, ``group_by().agg`` … go through
``LazyFrame._collect_eager``). A count, not a timer: it does not drift on a shared machine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import polars as pl

_WRAPPED = ("collect", "_collect_eager")


@dataclass
class QueryCount:
    queries: int = 0


@contextmanager
def count_queries() -> Iterator[QueryCount]:
    """``with count_queries() as n: …`` — ``n.queries`` is the number of polars queries run inside."""
    count = QueryCount()
    originals = {name: getattr(pl.LazyFrame, name) for name in _WRAPPED}

    def wrap(original):
        def counted(self, *args, **kwargs):
            count.queries += 1
            return original(self, *args, **kwargs)

        return counted

    for name, original in originals.items():
        setattr(pl.LazyFrame, name, wrap(original))
    try:
        yield count
    finally:
        for name, original in originals.items():
            setattr(pl.LazyFrame, name, original)
