"""Which rank each file is: what its content or name says, or what the user says (an order, a map).

:func:`resolve_rank` decides one file's rank; :func:`check_unique_ranks` refuses two files claiming
one rank, and never answers files of separate runs (other world sizes, other device types) with
"--rank-from order", which would make them ranks of one run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

from asaptrace.errors import RankError, UsageError
from asaptrace.ingest.base import RankInfo, source_name
from asaptrace.ingest.naming import NameHint
from asaptrace.userfiles import read_text


class RankedFile(Protocol):
    """What the rank check reads of a file's summary (``driver.FileSummary`` has it): a protocol,
    so this module needs nothing of the driver that imports it."""

    path: str
    rank_info: RankInfo
    notes: dict[str, Any]


RankFrom = Literal["auto", "content", "name", "order"]


def resolve_rank(
    info: RankInfo,
    path: Path,
    rank_from: RankFrom,
    explicit: int | None,
    hint: NameHint | None,
    *,
    single_file: bool = False,
) -> RankInfo:
    """Decide a file's rank: explicit (map/order) > content > name ``hint``, as ``rank_from`` allows."""
    extra = {}
    if hint is not None:
        extra = {
            k: v
            for k, v in (("dp", hint.dp), ("tp", hint.tp), ("pp", hint.pp), ("ep", hint.ep))
            if v is not None
        }
    base = RankInfo(**{**info.__dict__, **extra})
    if explicit is not None:
        return RankInfo(
            **{**base.__dict__, "rank": explicit, "source": "order" if rank_from == "order" else "map"}
        )
    if rank_from in ("auto", "content") and info.rank is not None:
        return base
    if rank_from in ("auto", "name") and hint is not None:
        return RankInfo(**{**base.__dict__, "rank": hint.rank, "source": f"filename:{hint.rule}"})
    if single_file and rank_from == "auto":
        return RankInfo(**{**base.__dict__, "rank": 0, "source": "single-file"})
    where = {
        "auto": "no rank in the file (distributedInfo.rank) nor in its name (rank-N, workerN, TP-x-DP-y-…, "
        "dp…_rank…)",
        "content": "no rank in the file (distributedInfo.rank)",
        "name": "no rank in the file name",
    }[rank_from]
    raise RankError(
        f"cannot tell which rank this is: {where}; pass --rank-from order or --rank-map FILE", path=path
    )


def load_rank_map(path: str | Path) -> dict[str, int]:
    """A rank map file: lines ``<file name or path> <rank>`` (whitespace, comma or '=' separated)."""
    mapping: dict[str, int] = {}
    p = Path(path)
    lines = read_text(p, "rank map").splitlines()
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").replace("=", " ").split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise UsageError(f"{p}:{n}: expected '<file> <rank>', got {line!r}")
        mapping[parts[0]] = int(parts[1])
    return mapping


def explicit_ranks(
    files: list[Path], rank_from: RankFrom, rank_map: dict[str, int] | None
) -> list[int | None]:
    if rank_from == "order":
        return list(range(len(files)))
    if not rank_map:
        return [None] * len(files)
    out: list[int | None] = []
    for f in files:
        hit = rank_map.get(str(f), rank_map.get(source_name(f), rank_map.get(f.name)))
        if hit is None:
            raise UsageError(f"{f}: not listed in the rank map")
        out.append(hit)
    return out


def check_unique_ranks(summaries: list[RankedFile]) -> None:
    """Two files claiming one rank are refused in one line, saying whether they look like
    separate runs (world sizes or device types differ) or one run whose files need a rank map."""
    seen: dict[int, RankedFile] = {}
    for s in summaries:
        r = s.rank_info.rank
        if r is None:  # resolved before this check; a file without one has nothing to clash with
            continue
        if r in seen:
            other = seen[r]
            sizes = (other.rank_info.world_size, s.rank_info.world_size)
            models = (other.notes.get("device_model"), s.notes.get("device_model"))
            if sizes[0] != sizes[1] and None not in sizes:  # two jobs: an order would only mix them
                hint = f"they say world sizes {sizes[0]} and {sizes[1]}: separate runs; ingest each run's files alone"
            elif models[0] != models[1] and all(models):  # never ordered into one run across device types
                hint = (
                    f"they ran on {models[0]} and {models[1]}: separate runs; ingest each run's files alone"
                )
            else:
                hint = "pass --rank-map FILE or --rank-from order to say which file is which rank"
            raise RankError(
                f"rank {r} is also claimed by {other.path} (found by {s.rank_info.source}); {hint}",
                path=s.path,
            )
        seen[r] = s
