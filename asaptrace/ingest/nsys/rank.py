"""Which rank, world size, host and device an nsys export is.

Why a module: nsys records no rank of its own; it is found in an NVTX thread name (``MPI Rank 3``,
written by nsys' MPI tracing), else in the launch environment the export keeps
(``TARGET_INFO_SYSTEM_ENV``: ``RANK``, ``OMPI_COMM_WORLD_RANK``, …), else the driver decides.
"""

from __future__ import annotations

import re
import sqlite3

import pyarrow as pa
import pyarrow.compute as pc

from asaptrace.ingest.base import RankInfo
from asaptrace.ingest.nsys.schema import NsysSchema

_RANK_IN_NAME = re.compile(r"\brank[\s_-]*(\d+)\b", re.IGNORECASE)
_RANK_ENV = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_WORLD_ENV = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")


def environment(conn: sqlite3.Connection, schema: NsysSchema) -> dict[str, str]:
    """Target facts (Hostname, …) and the launch environment (``DeviceEnvironment``) of the export."""
    if not schema.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
        return {}
    out: dict[str, str] = {}
    for name, value in conn.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV"):
        if not isinstance(value, str):
            continue
        if name == "DeviceEnvironment":
            for item in value.split("\x00"):
                k, sep, v = item.partition("=")
                if sep and k not in out:
                    out[k] = v
        elif isinstance(name, str):
            out[f"target:{name}"] = value
    return out


def rank_info(thread_names: dict[int, str], env: dict[str, str], events: pa.Table) -> RankInfo:
    """The rank an NVTX thread name gives (when exactly one), else the launch environment's; the
    device is the one that ran most device events."""
    ranks = {int(m.group(1)) for n in thread_names.values() if (m := _RANK_IN_NAME.search(n))}
    rank, source = (ranks.pop(), "nvtx") if len(ranks) == 1 else (None, "unknown")
    if rank is None:
        for key in _RANK_ENV:
            if env.get(key, "").strip().isdigit():
                rank, source = int(env[key]), f"env:{key}"
                break
    world = next((int(env[k]) for k in _WORLD_ENV if env.get(k, "").strip().isdigit()), None)
    dev = events.filter(events["is_device"]) if events.num_rows else events
    device = None
    if dev.num_rows:
        counts = pc.value_counts(dev["pid"]).to_pylist()
        device = int(max(counts, key=lambda c: c["counts"])["values"])
    return RankInfo(
        rank=rank, source=source, world_size=world, host=env.get("target:Hostname"), device=device
    )
