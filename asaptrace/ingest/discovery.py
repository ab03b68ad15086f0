"""Which files of what the user named are traces, and whether they look like one run.

Real folders hold more than traces: a ``truth.json``, a ``config.toml``, a CSV of results, a
README. A file found by *walking a folder* that is not a profiler trace (its name says no, or its
content matches no registered format) is skipped and listed, never fatal; a file *named on the
command line* is always taken, so a wrong one stays an error. A path given twice is read once
(and said so). A file named that some format reads by itself is read as it is, never folded into
the source beside it (``ingest kernel_details.csv`` reads that CSV, not the ``trace_view.json``
next to it); a companion named alone (a ``communication.json``) goes with its timeline.

After the files are read, :func:`run_warnings` checks that they plausibly belong to one run: two
byte-identical files (same sha256) would become two ranks of the same timeline; time ranges that
do not overlap, differing world sizes or device models, are the mark of several jobs mixed together (each gives
a nonsense "slow device" finding). These are warnings, kept in meta.json and shown by ``info``.

Two cases are refused instead, as one line (:func:`run_refusal`): a folder of *separate one-rank
runs* (every file says rank 0 of a world of 1, or no world size: each is a whole run, not a rank of
one), and files profiled on *different device types* (``deviceProperties`` names differ), unless
the caller says to mix them (``--mix-devices``). Neither is ever answered with "--rank-from order":
that would turn unrelated runs into the ranks of one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asaptrace.errors import IngestError, UnsupportedFormat, UsageError
from asaptrace.ingest.base import detect_format, group_sources, looks_like_trace
from asaptrace.units import plural, text_ns


@dataclass(frozen=True)
class Sources:
    """The sources to read (one path per source, in order) and what was left out, and why."""

    files: list[Path]
    skipped: list[dict[str, str]] = field(default_factory=list)  # {"path", "reason"}
    repeated: list[str] = field(default_factory=list)  # paths named more than once
    unreadable: list[dict[str, str]] = field(default_factory=list)  # {"path", "reason"} (skip_bad)

    def to_json(self) -> dict[str, Any]:
        return {"skipped": self.skipped, "repeated": self.repeated, "unreadable": self.unreadable}


def _walk(folder: Path) -> list[Path]:
    """Every non-hidden file under ``folder``, sorted."""
    return [
        q
        for q in sorted(folder.rglob("*"))
        if q.is_file() and not any(part.startswith(".") for part in q.relative_to(folder).parts)
    ]


def find_sources(paths: Iterable[str | Path], *, skip_bad: bool = False) -> Sources:
    """Expand ``paths`` into one path per source (see the module docstring for what is skipped).

    A file found in a folder that claims a trace format but cannot be read (a corrupt gzip stream)
    is an error, unless ``skip_bad``: then it is listed in ``unreadable`` with its reason."""
    paths = list(paths)
    named: list[Path] = []
    walked: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            named.append(p.resolve())
        elif p.is_dir():
            walked += [q.resolve() for q in _walk(p)]
        else:
            raise UsageError(f"{p}: no such file or directory")
    repeated = sorted({str(p) for p in named if named.count(p) > 1})
    explicit = set(named)
    candidates = list(dict.fromkeys([*named, *walked]))
    skipped: list[dict[str, str]] = []
    unreadable: list[dict[str, str]] = []
    files: list[Path] = []
    # a file named that is a trace by itself is read as it is (an Ascend kernel_details.csv named
    # beside its trace_view.json); the rest are grouped (an Ascend rank folder is one source)
    alone = [p for p in dict.fromkeys(named) if _trace_by_itself(p)]
    rest = [p for p in candidates if p not in set(alone)]
    for src in dict.fromkeys([*alone, *group_sources(rest)]):
        if src in explicit:
            files.append(src)
            continue
        try:
            reason = _not_a_trace(src)
        except IngestError as e:
            if not skip_bad:
                raise
            unreadable.append({"path": str(src), "reason": e.message})
            continue
        if reason is None:
            files.append(src)
        else:
            skipped.append({"path": str(src), "reason": reason})
    if not files:
        where = ", ".join(str(p) for p in paths)
        extra = f" ({len(skipped) + len(unreadable)} other files skipped)" if skipped or unreadable else ""
        raise UsageError(f"no trace files found in {where}{extra}")
    return Sources(files, skipped, repeated, unreadable)


def _trace_by_itself(path: Path) -> bool:
    """Whether a file named on the command line is a trace some format reads as it is."""
    try:
        detect_format(path)
    except IngestError:
        return False
    return True


def _not_a_trace(path: Path) -> str | None:
    """Why a file found in a folder is not a trace, or None when it is one."""
    if not looks_like_trace(path.name):
        return "not a trace by its name"
    try:
        detect_format(path)
    except UnsupportedFormat:
        return "content matches no trace format"
    return None


# ------------------------------------------------------------------------------ one run, or several?
@dataclass(frozen=True)
class SourceFacts:
    """What the checks need of one read source."""

    path: str
    sha256: str
    start_ns: int | None
    end_ns: int | None
    world_size: int | None
    device_model: str | None = None
    rank: int | None = None  # the rank the file was given
    rank_source: str = "unknown"  # where that rank came from (distributedInfo, filename:…, order, map)


def shown_names(paths: Sequence[str]) -> dict[str, str]:
    """path → how a sentence names it: its file name, or as many of its folders as tell it apart
    from another path of the same name (``rank0/kernel_details.csv``, ``rank1/kernel_details.csv``)."""
    parts = {p: Path(p).parts for p in paths}
    shown = {}
    for p, mine in parts.items():
        depth = 1
        while depth < len(mine) and any(
            q != p and theirs[-depth:] == mine[-depth:] for q, theirs in parts.items()
        ):
            depth += 1
        shown[p] = "/".join(mine[-depth:])
    return shown


def run_warnings(facts: Sequence[SourceFacts]) -> list[str]:
    """Warnings that the sources are not the ranks of one run (see the module docstring)."""
    warnings: list[str] = []
    name = shown_names([f.path for f in facts])
    by_hash: dict[str, list[str]] = {}
    for f in facts:
        if f.sha256:
            by_hash.setdefault(f.sha256, []).append(name[f.path])
    for names in by_hash.values():
        if len(names) > 1:
            warnings.append(
                f"{' and '.join(names)} are byte-identical (same sha256): one trace read as "
                f"{plural(len(names), 'rank')}"
            )
    sizes = sorted({f.world_size for f in facts if f.world_size is not None})
    if len(sizes) > 1:
        warnings.append(
            f"the files say different world sizes ({', '.join(map(str, sizes))}): they look like "
            "several runs mixed together"
        )
    models = sorted({f.device_model for f in facts if f.device_model})
    if len(models) > 1:
        warnings.append(
            f"the files were profiled on different devices ({', '.join(models)}): they look like "
            "several runs mixed together"
        )
    spans = sorted(
        (f.start_ns, f.end_ns, f.path) for f in facts if f.start_ns is not None and f.end_ns is not None
    )
    if len(spans) > 1:
        latest_start = max(spans, key=lambda s: s[0])
        earliest_end = min(spans, key=lambda s: s[1])
        if latest_start[0] > earliest_end[1]:  # no instant inside every file's time range
            gap = latest_start[0] - earliest_end[1]
            warnings.append(
                f"the files' time ranges do not overlap ({name[earliest_end[2]]} ends "
                f"{_gap(gap)} before {name[latest_start[2]]} starts): they look like several "
                "runs mixed together; their cross-rank findings are not meaningful"
            )
    return warnings


def _gap(ns: int) -> str:
    days = round(ns / 86_400e9)
    return (f"{days} day" + ("s" if days != 1 else "")) if ns >= 86_400e9 else text_ns(ns)


def _names(paths: Sequence[str], show: int = 3) -> str:
    shown = shown_names(paths)
    names = [shown[p] for p in paths]
    return ", ".join(names[:show]) + (f" and {len(names) - show} more" if len(names) > show else "")


def run_refusal(facts: Sequence[SourceFacts], *, mix_devices: bool = False) -> str | None:
    """Why the sources cannot be one store (one line), or None: separate one-rank runs, or device
    types mixed without ``mix_devices`` (see the module docstring)."""
    alone = [
        f for f in facts if f.rank == 0 and f.rank_source == "distributedInfo" and f.world_size in (None, 1)
    ]
    if len(facts) > 1 and len(alone) == len(facts):
        devices = sorted({f.device_model for f in facts if f.device_model})
        on = f" (on {', '.join(devices)})" if len(devices) > 1 else ""
        return (
            f"{len(facts)} separate one-rank runs{on}: each of {_names([f.path for f in facts])} says "
            "it is rank 0 of a one-rank world; ingest each alone"
        )
    by_model: dict[str, list[str]] = {}
    for f in facts:
        if f.device_model:
            by_model.setdefault(f.device_model, []).append(f.path)
    if len(by_model) > 1 and not mix_devices:
        said = "; ".join(f"{model}: {_names(paths)}" for model, paths in sorted(by_model.items()))
        return (
            f"the files ran on different device types ({said}); ingest each run alone, or pass "
            "--mix-devices to make them ranks of one store"
        )
    return None
