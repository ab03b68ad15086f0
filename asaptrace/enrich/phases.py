"""The phase of every step (prefill, decode, mixed, training, unknown) and the batches a serving
framework's step annotation names.

What the trace says, in this order:

1. **Step annotations that name their batch**, read by the taxonomy's ``[[step]]`` rules (package
   data, ``asaptrace/enrich/rules/*.toml``): SGLang's ``step[EXTEND bs=15 toks=15360]`` (the mode
   says the phase), vLLM's ``execute_context_2(4096)_generation_30(30)`` and
   ``execute_8192_context_9(sq8155sk8430…)_generation_37(sq37sk34489…)`` (prefill requests and
   decode requests: both → mixed, one → that one), asaptrace's ``prefill_step#N`` (prefill). Step
   spans nested in one another are one step (:mod:`asaptrace.enrich.segment`); where the spans of
   a step disagree, prefill + decode is mixed.
2. **Training markers** (``[[marker]]`` rules: autograd's backward functions, ``…Backward0`` ops,
   optimizer steps): a run that holds any is training, and so is every step (1) did not name.
3. Otherwise ``unknown``: the trace does not say (the analyses still run, and say "steps").

The result is the *steps table* (one row per step of the run; kept in ``meta.json`` under
``segmentation.steps``, read back by :func:`asaptrace.info.steps_of`):

======================  =======  =====================================================
column                  dtype    meaning
======================  =======  =====================================================
step                    Int32    step id (as in ``events.step``)
phase                   String   prefill | decode | mixed | training | unknown
requests                Int64    requests in the step's batch (null: not said)
new_tokens              Int64    new tokens the step computes (null: not said)
source                  String   ``annotation:<profile>``, ``training markers`` or ``none``
======================  =======  =====================================================

:func:`batches_from_step_names` turns the counts into the batches table when no annotation args
or sidecar give the requests one by one: the requests are **derived** (the annotation gives only
totals) — n requests of equal length (the remainder spread one token each), or, when vLLM gives
Σs² too, n − 1 of one length and one of another, which keeps both Σs and Σs² (the attention cost
grows with Σs²); decode requests of their tokens with the context spread evenly as cached tokens.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import polars as pl

from asaptrace.enrich.taxonomy import STEP_COUNTS, Taxonomy
from asaptrace.info import STEPS_SCHEMA, steps_json, steps_of

__all__ = [
    "STEPS_SCHEMA",
    "batches_from_step_names",
    "read_step_names",
    "step_table",
    "steps_json",
    "steps_of",
]

_COUNTS = STEP_COUNTS
NAME_SCHEMA: dict[str, Any] = {
    "step_name": pl.String,
    "name_phase": pl.String,
    "profile": pl.String,
    **{c: pl.Int64 for c in _COUNTS},
}


def read_step_name(name: str, tax: Taxonomy) -> dict[str, Any] | None:
    """What the first ``[[step]]`` rule matching ``name`` reads from it (None: no rule matches)."""
    for rule in tax.step_rules:
        m = rule.match.search(name)
        if not m:
            continue
        got = {k: (int(v) if v is not None else None) for k, v in m.groupdict().items() if k in _COUNTS}
        row: dict[str, Any] = {"step_name": name, "profile": rule.profile, **dict.fromkeys(_COUNTS)}
        row.update(got)
        mode = m.groupdict().get("mode")
        phase = dict(rule.modes).get(mode or "", rule.phase) if rule.modes else rule.phase
        if phase is None:
            pre, dec = row["prefill_requests"] or 0, row["decode_requests"] or 0
            phase = "mixed" if pre and dec else "prefill" if pre else "decode" if dec else "unknown"
        row["name_phase"] = phase
        if row["requests"] is None and row["prefill_requests"] is not None:
            row["requests"] = row["prefill_requests"] + (row["decode_requests"] or 0)
        if row["tokens"] is None and row["prefill_tokens"] is not None:
            row["tokens"] = row["prefill_tokens"] + (row["decode_tokens"] or 0)
        return row
    return None


def read_step_names(names: Iterable[str], tax: Taxonomy) -> pl.DataFrame:
    """:func:`read_step_name` of each distinct name that a rule reads (one row per name)."""
    rows = [r for n in dict.fromkeys(names) if n is not None and (r := read_step_name(n, tax))]
    return pl.DataFrame(rows, schema=NAME_SCHEMA, orient="row")


def _richest_first(named: pl.DataFrame) -> pl.DataFrame:
    """Step spans by rank and step, and within one the span whose name says the most first
    (vLLM's ``execute_…`` with Σs² before SGLang's ``step[…]`` with totals only)."""
    info = pl.sum_horizontal([pl.col(c).is_not_null().cast(pl.Int32) for c in _COUNTS]).alias("_info")
    return (
        named.filter(pl.col("step").is_not_null())
        .with_columns(info)
        .sort(["rank", "step", "_info"], descending=[False, False, True], maintain_order=True)
    )


def _combine(phases: list[str]) -> str:
    got = set(phases) - {"unknown"}
    if not got:
        return "unknown"
    if len(got) == 1:
        return got.pop()
    return "mixed" if got <= {"prefill", "decode", "mixed"} else sorted(got)[0]


def step_table(steps: Iterable[int], named: pl.DataFrame, *, training: bool) -> pl.DataFrame:
    """The steps table (module docstring) of the run whose steps are ``steps``; ``named`` holds the
    step spans a rule read (rank, step, and :data:`NAME_SCHEMA`'s columns), ``training`` whether
    the run holds a training marker."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for r in _richest_first(named).iter_rows(named=True):
        by_step.setdefault(int(r["step"]), []).append(r)
    rows = []
    for s in sorted(set(int(x) for x in steps) | set(by_step)):
        spans = by_step.get(s, [])
        phase = _combine([r["name_phase"] for r in spans]) if spans else "unknown"
        first = next((r for r in spans if r["requests"] is not None or r["tokens"] is not None), None)
        source = f"annotation:{spans[0]['profile']}" if spans else "none"
        if phase == "unknown" and training:
            phase, source = "training", "training markers"
        rows.append(
            {
                "step": s,
                "phase": phase,
                "requests": first["requests"] if first else None,
                "new_tokens": first["tokens"] if first else None,
                "source": source,
            }
        )
    return pl.DataFrame(rows, schema=STEPS_SCHEMA, orient="row")


# ----------------------------------------------------------------------------- batches from the counts
def _equal(total: int, n: int) -> list[int]:
    """``n`` integers summing to ``total``, as equal as can be."""
    q, r = divmod(total, n)
    return [q + (1 if i < r else 0) for i in range(n)]


def _keep_sumsq(total: int, n: int, sumsq: int | None) -> list[int]:
    """``n`` lengths summing to ``total`` whose squares sum to about ``sumsq``: n − 1 of length a
    and one of b ≥ a (solving (n−1)a + b = S, (n−1)a² + b² = Q for the smaller root a)."""
    if n <= 1 or sumsq is None or n * sumsq <= total * total:
        return _equal(total, n)
    m = n - 1
    a = (total * m - math.sqrt(m * (n * sumsq - total * total))) / (m * n)
    a = max(0, round(a))
    b = total - m * a
    return [a] * m + [b] if b >= a else _equal(total, n)


def _requests_of(row: dict[str, Any]) -> list[tuple[int, int | None]]:
    """(seq_len, cached_len) of each derived request of one step annotation: the batches table's
    seq_len is the whole prompt (prefix included), so new tokens = seq_len − cached_len."""
    out: list[tuple[int, int | None]] = []
    pre_n, dec_n = row.get("prefill_requests"), row.get("decode_requests")
    if pre_n is None and dec_n is None:
        n, toks = row.get("requests"), row.get("tokens")
        if n and toks is not None:
            out += [(s, None) for s in _equal(toks, n)]
        return out
    for n, toks, ctx, sq in (
        (pre_n, row.get("prefill_tokens"), row.get("prefill_context"), row.get("prefill_sumsq")),
        (dec_n, row.get("decode_tokens"), row.get("decode_context"), None),
    ):
        if not n or toks is None:
            continue
        lens = _keep_sumsq(toks, n, sq)
        cached = _equal(max(0, ctx - toks), n) if ctx is not None else [None] * n
        out += [(s + (c or 0), c) for s, c in zip(lens, cached, strict=True)]
    return out


def batches_from_step_names(
    named: pl.DataFrame, dp_of: dict[int, int], schema: dict[str, Any]
) -> pl.DataFrame:
    """Derived batches (module docstring) of the step spans a rule read: one batch per (step, DP
    group), from the first rank of the group that names one; ``dp_of`` maps rank → DP group."""
    rows: list[dict[str, Any]] = []
    seen: set[tuple[int, int]] = set()
    for r in _richest_first(named).iter_rows(named=True):
        key = (int(r["step"]), dp_of.get(int(r["rank"]), 0))
        if key in seen:
            continue
        reqs = _requests_of(r)
        if not reqs:
            continue
        seen.add(key)
        rows += [
            {
                "step": key[0],
                "dp_group": key[1],
                "micro_batch": None,
                "request_id": None,
                "seq_len": s,
                "cached_len": c,
                "arrival_ns": None,
            }
            for s, c in reqs
        ]
    return pl.DataFrame(rows, schema=schema, orient="row")
