"""Exports of a store to other tools' formats, one registry entry per format.

Built-in: ``perfetto`` (Chrome trace-event JSON that ui.perfetto.dev and chrome://tracing open;
see :mod:`asaptrace.export.perfetto`). An exporter is ``(events, ranks, barrier_instances, **kw) ->
document``; register another with ``EXPORT_FORMATS.register(name, fn)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asaptrace.export.perfetto import export_perfetto
from asaptrace.registry import Registry

Exporter = Callable[..., dict[str, Any]]

EXPORT_FORMATS: Registry[Exporter] = Registry("export format")
EXPORT_FORMATS.register("perfetto", export_perfetto)

__all__ = ["EXPORT_FORMATS", "Exporter"]
