"""The sweep's result, typed: :class:`SweepResult`, its versioned JSON (writer and reader side by side).

docs/reference/sweep-json.md documents the keys. The result is frozen; it reads like the mapping
its JSON is (``res["slo_rps"]``) so the faces, the report and a notebook read one thing whether it
came from a run or from a file, and :meth:`SweepResult.read` checks a file is one (one line naming
the file otherwise). A notebook shows it through :mod:`asaptrace.notebook` (the faces' views).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from asaptrace.display import HtmlRepr
from asaptrace.errors import UsageError
from asaptrace.units import rps_text
from asaptrace.userfiles import write_atomic

#: 2: costs_from, cost_fit, cost_set, cost_warnings (a file of version 1 is read, those unknown)
#: 3: question, capacity, slo_median/slo_range/slo_by_seed, seeds, min_arrivals, slo_capped;
#: per point n_requests (arrivals), backlog_tokens, stable (files of versions 1–2 are read)
#: 4: policy_settings; the deployment knobs (default_*, chunk_tokens, asap_*) left knobs for it
#: 5: slo_above_bound replaces slo_capped (nothing is capped); per point backlog_half_tokens,
#: offered_tokens (the steady-state rule); min_arrivals 2,000 on every face; duration_ns the run's
SCHEMA_VERSION = 5
#: the keys a file must have to be read as a sweep result
REQUIRED = ("schema_version", "policies", "curves", "slo_rps", "slo_ttft_ns")
_SHAPES = {"policies": list, "curves": dict, "slo_rps": dict, "slo_ttft_ns": (int, float)}
#: The columns of a row of ``decomposition`` the faces' tables show, and their types (one
#: declaration for the views and the CSV/Parquet tables)
DECOMPOSITION_SCHEMA = {
    "policy": pl.String,
    "bucket": pl.String,
    "n_requests": pl.Int64,
    "mean_ttft_ns": pl.Int64,
    "queue_share": pl.Float64,
    "own_share": pl.Float64,
    "sync_share": pl.Float64,
}


@dataclass(frozen=True, repr=False)
class SweepResult(HtmlRepr, Mapping[str, Any]):
    """One sweep: per policy its rate → TTFT curve, its SLO-compliant throughput and the ratio to the
    first policy; the TTFT decomposition at one rate; the knobs and costs it assumed; and, when
    asked, the calibration and the one-knob-at-a-time sensitivity (``vary``, ``tornado``).

    Fields are in the JSON's key order (:meth:`to_json` writes them so)."""

    scenario: str
    policies: list[str]
    slo_ttft_ns: int
    duration_ns: int
    workload: str
    slo_rps: dict[str, float | None]
    slo_censored: dict[str, bool]
    ratios: dict[str, float | None]
    mean_ttft_ns_at_1rps: dict[str, int | None]
    curves: dict[str, list[dict[str, Any]]]
    decomposition_rate: float
    decomposition: list[dict[str, Any]]
    knobs: dict[str, Any] = field(default_factory=dict)
    #: per policy every setting it was served with (its deployment and mechanisms: the policy
    #: object's fields, defaults and ``--set POLICY.SETTING`` included)
    policy_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    lengths_fit: dict[str, Any] | None = None
    paper: dict[str, Any] | None = None
    costs_from: str | None = None
    cost_fit: dict[str, Any] | None = None
    cost_set: dict[str, Any] = field(default_factory=dict)
    cost_warnings: list[str] = field(default_factory=list)
    reading: str = ""
    #: the question it answers: "the paper's scenario", "served under load, your lengths", …
    question: str = ""
    #: per policy its capacity bounds: bound_rps, binding resource, per resource (DOMAIN §8)
    capacity: dict[str, Any] = field(default_factory=dict)
    #: the seeds searched; per policy the SLO rate of each, their [min, max]; slo_rps is the median
    seeds: list[int] = field(default_factory=list)
    slo_by_seed: dict[str, list[float | None]] = field(default_factory=dict)
    slo_range: dict[str, list[float] | None] = field(default_factory=dict)
    #: policies a seed of which served above 1.05 × its capacity bound (never clipped: a defect of
    #: the steady state or of the model, said; empty)
    slo_above_bound: list[str] = field(default_factory=list)
    #: each rate's run extended to at least this many arrivals (0 in files before version 5)
    min_arrivals: int = 0
    calibration: dict[str, Any] | None = None
    vary: list[dict[str, Any]] = field(default_factory=list)
    tornado: list[dict[str, Any]] = field(default_factory=list)
    schema_version: int = SCHEMA_VERSION

    # ------------------------------------------------------------------ the mapping its JSON is
    def __getitem__(self, key: str) -> Any:
        if key not in _NAMES:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_ORDER)

    def __len__(self) -> int:
        return len(_ORDER)

    def with_(self, **changes: Any) -> SweepResult:
        """A copy with fields changed (the result itself never changes)."""
        return replace(self, **changes)

    # -------------------------------------------------------------------------- JSON, both ways
    def to_json(self) -> dict[str, Any]:
        """The JSON object (docs/reference/sweep-json.md), keys in their documented order."""
        return {k: getattr(self, k) for k in _ORDER}

    def write(self, path: str | Path) -> Path:
        """Write the JSON atomically (a temp file renamed into place)."""
        text = json.dumps(self.to_json(), indent=1, sort_keys=False, allow_nan=False) + "\n"
        return write_atomic(path, text.encode("utf-8"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, path: str | Path | None = None) -> SweepResult:
        """A result from its JSON object, checked (UsageError naming ``path`` otherwise)."""
        if not isinstance(data, Mapping) or any(k not in data for k in REQUIRED):
            raise UsageError(
                "is not a sweep results JSON (expects the keys of `asaptrace sweep -o`: "
                + ", ".join(REQUIRED)
                + ")",
                path=path,
            )
        wrong = [k for k, t in _SHAPES.items() if not isinstance(data[k], t)]
        if wrong:
            raise UsageError(f"is not a sweep results JSON ({', '.join(wrong)} of the wrong type)", path=path)
        if data["schema_version"] not in (1, 2, 3, 4, SCHEMA_VERSION):
            raise UsageError(
                f"sweep results schema_version {data['schema_version']!r} (expects 1 to {SCHEMA_VERSION})",
                path=path,
            )
        known = {k: data[k] for k in _NAMES if k in data}
        pols = list(data["policies"])
        defaults: dict[str, Any] = {
            "scenario": "–",
            "duration_ns": 0,
            "workload": "–",
            "slo_censored": dict.fromkeys(pols, False),
            "ratios": dict.fromkeys(pols),
            "mean_ttft_ns_at_1rps": dict.fromkeys(pols),
            "decomposition_rate": 0.0,
            "decomposition": [],
        }
        return cls(**(defaults | known))

    @classmethod
    def read(cls, path: str | Path) -> SweepResult:
        """Read a results file written by ``asaptrace sweep -o`` (one-line UsageError otherwise)."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError("no such sweep results file", path=path) from None
        except IsADirectoryError:
            raise UsageError("is a folder, not a sweep results JSON", path=path) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise UsageError(
                f"is not a sweep results JSON ({' '.join(str(err).split())})", path=path
            ) from None
        return cls.from_json(data, path=path)

    def __repr__(self) -> str:
        shown = ", ".join(f"{p} {rps_text(self.slo_rps.get(p))}" for p in self.policies)
        return f"<SweepResult {self.scenario}: SLO RPS {shown}>"


def headline_policy(policies: list[str] | tuple[str, ...]) -> str:
    """The policy a ratio against the first is quoted for: ``asap`` when swept, else the last."""
    return "asap" if "asap" in policies[1:] else policies[-1]


_NAMES = frozenset(f.name for f in fields(SweepResult))
#: JSON order: the version first, as every results file has it
_ORDER = ("schema_version", *(f.name for f in fields(SweepResult) if f.name != "schema_version"))


def median_over_seeds(by_seed: list[dict[str, Any]], policies: tuple[str, ...]) -> dict[str, Any]:
    """Per policy: the median SLO rate over seeds (a seed that met the SLO at no rate counts 0),
    censored when any seed was (``slo``); the [min, max] over seeds (``range``) and each seed's
    rate (``by_seed``). Never clipped to a bound: a seed above its bound is a defect, named by
    :func:`~asaptrace.replay.serving.steady.above_bound`."""
    slo: dict[str, Any] = {}
    ranges: dict[str, Any] = {}
    per: dict[str, Any] = {}
    for p in policies:
        vals = [r[p]["slo_rps"] for r in by_seed]
        per[p] = vals
        if all(v is None for v in vals):
            slo[p] = {"slo_rps": None, "censored": False}
            ranges[p] = None
            continue
        x = [0.0 if v is None else float(v) for v in vals]
        slo[p] = {
            "slo_rps": round(float(np.median(x)), 4),
            "censored": any(r[p]["censored"] for r in by_seed),
        }
        ranges[p] = [round(min(x), 4), round(max(x), 4)]
    return {"slo": slo, "range": ranges, "by_seed": per}


def slo_ratio(this: dict[str, Any], base: dict[str, Any]) -> float | None:
    """``this`` policy's SLO throughput over ``base``'s; None when either is missing or censored
    (a lower bound over a lower bound says nothing)."""
    a, b = this["slo_rps"], base["slo_rps"]
    if a is None or not b or this["censored"] or base["censored"]:
        return None
    return round(a / b, 4)
