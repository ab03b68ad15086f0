"""Which rank and device a Kineto trace file is: ``distributedInfo``, ``deviceProperties`` and the events.

Why a module: the rank identity is read from the header (and checked), the device is the one that
ran most device events, and its model name lets the driver notice files of several runs mixed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from asaptrace.ingest.base import RankInfo


def rank_info(header: dict[str, Any], events: pa.Table) -> RankInfo:
    """The rank ``distributedInfo`` names (a non-negative int, else unknown) and its main device."""
    dist = header.get("distributedInfo")
    info = dist if isinstance(dist, dict) else {}
    rank = info.get("rank")
    world = info.get("world_size")
    ok = isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0
    return RankInfo(
        rank=rank if ok else None,
        source="distributedInfo" if ok else "unknown",
        world_size=world if isinstance(world, int) else None,
        device=main_device(events),
    )


def device_model(header: dict[str, Any], device: int | None) -> str | None:
    """The name ``deviceProperties`` gives the rank's device (e.g. "NVIDIA A100-PG509-200"): files
    of one run share it, so differing names are a sign of several runs mixed together."""
    props = header.get("deviceProperties")
    if not isinstance(props, list):
        return None
    entries = [p for p in props if isinstance(p, dict) and isinstance(p.get("name"), str)]
    mine = [p for p in entries if p.get("id") == device]
    return (mine or entries or [{"name": None}])[0]["name"]


def main_device(events: pa.Table) -> int | None:
    """The device id (GPU pid) that ran most device events."""
    pid = events.column("pid").to_numpy()
    dev = pid[events.column("is_device").to_numpy() & (pid >= 0)]
    if len(dev) == 0:
        return None
    values, first, counts = np.unique(dev, return_index=True, return_counts=True)
    # the most events; among equals, the one seen first (what value_counts' order gave)
    return int(values[np.lexsort((first, -counts))[0]])
