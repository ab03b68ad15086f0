"""Arrow schemas of the store's tables, the enums they use, and the store format version.

Every source format is turned into these tables; nothing downstream knows which profiler a rank
came from. Times are int64 nanoseconds on the run's clock (after alignment, once enrich has run).
Column meanings are documented in ``docs/reference/store.md``.
"""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

#: Bumped whenever what a store holds or means changes: a table's columns, an enum's values, a
#: meta.json key (:data:`META_KEYS`) — or a meaning the code gives them (how steps are assigned, what
#: a breakdown part counts), which no fingerprint sees. A store of another version is refused with
#: the command that rebuilds it (:func:`asaptrace.store.rebuild_command`).
#: v2 (issue 42): meta.json records how the store was ingested (``ingest``: the rebuild command),
#: and the events' step assignment changed with it (a v1 store's steps may differ).
STORE_FORMAT_VERSION = 2

#: The fingerprint (:func:`store_fingerprint`) of each format version's tables and meta.json keys:
#: tests/test_store_version.py fails when the schema or the keys change and this line (the
#: version) does not — bump :data:`STORE_FORMAT_VERSION`, then record the new fingerprint here.
STORE_FINGERPRINTS: dict[int, str] = {2: "bc5be7293439f276"}

#: Keys of annotation args every ingester keeps in ``args.extra`` (segmentation and batches read them).
ANNOTATION_ARG_KEYS = (
    "step",
    "layer",
    "micro_batch",
    "dp_group",
    "seq_lens",
    "cached_lens",
    "request_ids",
    "arrivals_ns",
)


class Kind(StrEnum):
    """What an event does, as far as MoE prefill is concerned (set by the taxonomy)."""

    ATTENTION = "attention"
    MOE = "moe"
    DISPATCH = "dispatch"
    COMBINE = "combine"
    GATE = "gate"
    SHARED_EXPERT = "shared_expert"
    DENSE_MLP = "dense_mlp"
    COLLECTIVE = "collective"
    MEMCPY = "memcpy"
    COMPUTE = "compute"
    ANNOTATION = "annotation"
    HOST = "host"
    OTHER = "other"


class Role(StrEnum):
    """What a device does in the deployment."""

    FUSED = "fused"  # coupled: attention and experts on the same device
    ATTENTION = "attention"
    EXPERT = "expert"
    UNKNOWN = "unknown"


KINDS: tuple[str, ...] = tuple(k.value for k in Kind)
COMM_KINDS: frozenset[str] = frozenset({Kind.DISPATCH, Kind.COMBINE, Kind.COLLECTIVE})

_dict_str = pa.dictionary(pa.int32(), pa.string())

#: One row per timed span (or instant, dur_ns = 0) of one rank.
EVENTS_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("pid", pa.int32(), nullable=False),  # source process / device id (see streams)
        pa.field("stream", pa.int32(), nullable=False),  # device stream or host thread (see streams)
        pa.field("is_device", pa.bool_(), nullable=False),
        pa.field("kind", _dict_str, nullable=False),
        pa.field("name", _dict_str, nullable=False),
        pa.field("cat", _dict_str),  # source category, unmodified
        pa.field("ts_ns", pa.int64(), nullable=False),
        pa.field("dur_ns", pa.int64(), nullable=False),
        pa.field("step", pa.int32()),
        pa.field("layer", pa.int16()),
        pa.field("micro_batch", pa.int8()),
        pa.field("corr", pa.int64()),  # correlation id linking a launch and its kernel
        pa.field("eid", pa.int64(), nullable=False),  # event id, unique within the rank (source order)
    ]
)

#: Useful event arguments, one row per event that carried any (joined to events on rank, eid).
ARGS_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("eid", pa.int64(), nullable=False),
        pa.field("external_id", pa.int64()),
        pa.field("collective", pa.string()),  # NCCL 'Collective name'
        pa.field("in_nelems", pa.int64()),
        pa.field("out_nelems", pa.int64()),
        pa.field("group_size", pa.int32()),
        pa.field("dtype", pa.string()),
        pa.field("pg_name", pa.string()),
        pa.field("pg_desc", pa.string()),
        pa.field("pg_ranks", pa.string()),  # as written by the profiler, e.g. "[0, 1]"
        pa.field("in_split", pa.string()),
        pa.field("out_split", pa.string()),
        pa.field("input_dims", pa.string()),  # JSON text
        pa.field("input_type", pa.string()),  # JSON text
        pa.field("extra", pa.string()),  # JSON object of other recognised keys (annotation args)
    ]
)

#: Flow events (arrows between events), kept as read.
FLOWS_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("flow_id", pa.string(), nullable=False),
        pa.field("phase", pa.string(), nullable=False),  # s (start), t (step), f (finish)
        pa.field("cat", pa.string()),
        pa.field("name", pa.string()),
        pa.field("pid", pa.int32(), nullable=False),
        pa.field("stream", pa.int32(), nullable=False),
        pa.field("ts_ns", pa.int64(), nullable=False),
    ]
)

#: One row per (rank, pid, stream) timeline, with the profiler's own names for it.
STREAMS_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("pid", pa.int32(), nullable=False),
        pa.field("stream", pa.int32(), nullable=False),
        pa.field("is_device", pa.bool_(), nullable=False),
        pa.field("source_pid", pa.string()),
        pa.field("source_tid", pa.string()),
        pa.field("process_name", pa.string()),
        pa.field("process_label", pa.string()),
        pa.field("thread_name", pa.string()),
    ]
)

#: One row per rank.
RANKS_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("role", pa.string(), nullable=False),
        pa.field("dp_group", pa.int32()),
        pa.field("tp_index", pa.int32()),
        pa.field("pp_index", pa.int32()),
        pa.field("ep_index", pa.int32()),
        pa.field("world_size", pa.int32()),
        pa.field("host", pa.string()),
        pa.field("device", pa.int32()),
        pa.field("clock_offset_ns", pa.int64(), nullable=False),
        pa.field("clock_residual_ns", pa.int64()),
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("format", pa.string(), nullable=False),
        pa.field("rank_source", pa.string(), nullable=False),  # how the rank was found
        pa.field("events", pa.int64(), nullable=False),
    ]
)

#: Batch composition per step and DP group (when the trace or a sidecar says it).
BATCHES_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int32(), nullable=False),
        pa.field("dp_group", pa.int32(), nullable=False),
        pa.field("micro_batch", pa.int8()),
        pa.field("request_id", pa.string()),
        pa.field("seq_len", pa.int64(), nullable=False),
        pa.field("cached_len", pa.int64()),
        pa.field("arrival_ns", pa.int64()),
    ]
)

TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "events": EVENTS_SCHEMA,
    "args": ARGS_SCHEMA,
    "flows": FLOWS_SCHEMA,
    "streams": STREAMS_SCHEMA,
    "ranks": RANKS_SCHEMA,
    "batches": BATCHES_SCHEMA,
}


def empty_table(name: str) -> pa.Table:
    """An empty table with the named schema."""
    return TABLE_SCHEMAS[name].empty_table()


def conform(table: pa.Table, name: str) -> pa.Table:
    """Cast ``table`` to the named schema (same column order and types), raising on a mismatch."""
    schema = TABLE_SCHEMAS[name]
    missing = [f.name for f in schema if f.name not in table.column_names]
    if missing:
        raise ValueError(f"table {name!r} lacks columns {missing}")
    return table.select(schema.names).cast(schema)


#: The keys meta.json may hold (top level), and for its blocks the keys they may hold (None: a value
#: or a block whose keys are not the store's format — a list, a replay block with its own
#: ``schema_version``). A key written that is not here fails tests/test_store_version.py.
META_KEYS: dict[str, tuple[str, ...] | None] = {
    "format_version": None,
    "asaptrace_version": None,
    "ingest": ("inputs", "parallel", "batches", "taxonomy"),
    "discovery": ("skipped", "repeated", "unreadable", "warnings"),
    "parallel": ("dp", "tp", "ep", "pp", "world_size", "deployment", "source", "declared_world_size"),
    "taxonomy_profile": None,
    "enriched": None,
    "accounting": ("read", "kept", "kept_by_table", "rejected", "files_read", "files_unreadable"),
    "sources": None,
    "taxonomy": ("label", "profiles"),
    "segmentation": ("step_source", "layer_source", "notes", "steps"),
    "clock": ("status", "reference_rank", "n_instances", "notes"),
    "batches_source": None,
    "replay": None,
    "files": None,
}


def store_fingerprint() -> str:
    """A short hash of what a store of this version holds: every table's columns (name, type,
    nullability), the enums' values and :data:`META_KEYS`. It changes with any of them."""
    import hashlib
    import json

    described = {
        "tables": {name: [(f.name, str(f.type), f.nullable) for f in s] for name, s in TABLE_SCHEMAS.items()},
        "kinds": list(KINDS),
        "roles": [r.value for r in Role],
        "annotation_args": list(ANNOTATION_ARG_KEYS),
        "meta": {k: list(v) if v is not None else None for k, v in META_KEYS.items()},
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]
