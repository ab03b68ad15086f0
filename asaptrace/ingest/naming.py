"""Rank and parallel indices from file and folder names.

Recognised, in this order (the first match wins):

* vLLM-Ascend folders ``dp{d}_pp{p}_tp{t}_…_rank{r}`` → rank r, DP d, PP p, TP t
* SGLang files ``…-TP-{t}-DP-{d}-PP-{p}-EP-{e}…`` → rank t (SGLang's TP rank is the global device
  index when DP attention spans the TP world), DP d, PP p, EP e
* ``rank{N}``, ``rank-N``, ``rank_N`` → rank N
* ``worker{N}`` (PyTorch's default per-worker names) → rank N
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class NameHint:
    rank: int
    rule: str
    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None


_VLLM_ASCEND = re.compile(r"dp(\d+)_pp(\d+)_tp(\d+).*?_rank(\d+)", re.IGNORECASE)
_SGLANG = re.compile(r"TP-(\d+)-DP-(\d+)-PP-(\d+)-EP-(\d+)")
_RANK = re.compile(r"(?:^|[^a-z])rank[-_]?(\d+)", re.IGNORECASE)
_WORKER = re.compile(r"(?:^|[^a-z])worker[-_]?(\d+)", re.IGNORECASE)


def rank_from_name(path: str | Path) -> NameHint | None:
    """Parse the file name first, then its parent folders (nearest first)."""
    p = Path(path)
    for part in [p.name, *[q.name for q in p.parents][:3]]:
        hint = _parse(part)
        if hint is not None:
            return hint
    return None


def _parse(name: str) -> NameHint | None:
    if m := _VLLM_ASCEND.search(name):
        d, pp, t, r = map(int, m.groups())
        return NameHint(rank=r, rule="vllm-ascend", dp=d, pp=pp, tp=t)
    if m := _SGLANG.search(name):
        t, d, pp, e = map(int, m.groups())
        return NameHint(rank=t, rule="sglang", dp=d, tp=t, pp=pp, ep=e)
    if m := _RANK.search(name):
        return NameHint(rank=int(m.group(1)), rule="rank")
    if m := _WORKER.search(name):
        return NameHint(rank=int(m.group(1)), rule="worker")
    return None
