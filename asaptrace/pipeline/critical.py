"""store → the critical path of each step (or annotation window), across ranks."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from asaptrace.analyze.critical import CriticalPaths


def critical_store(
    store_path: str | Path, *, annotation: str | None = None, top: int = 5, faster: float = 0.2
) -> CriticalPaths:
    """Open a store and walk the critical path of every step (``annotation``: of every instance
    of that annotation instead, as HTA's analysis takes it); see :mod:`asaptrace.analyze.critical`."""
    from asaptrace.analyze.critical import CycleError, NoWindows, critical_path
    from asaptrace.errors import UsageError
    from asaptrace.store import TraceStore

    if not 0 < faster < 1:
        raise UsageError(f"--faster must be a fraction between 0 and 1, not {faster}")
    if top < 0:
        raise UsageError(f"--top must be 0 or more, not {top}")
    store = TraceStore.open(store_path)
    try:
        return critical_path(
            store.events(),
            store.ranks(),
            args=store.scan("args"),
            annotation=annotation,
            top=top,
            faster=faster,
        )
    except (NoWindows, CycleError) as e:
        raise UsageError(f"{store_path}: {e}") from None
