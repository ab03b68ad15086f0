"""Stand-in for the replay branch's engine and cost model, until they are merged.

The serving sweep must run on the project's ONE event engine (``replay/engine.py``) and ONE cost
model (``replay/costs.py``). Those were not committed when this branch was built, so this module
provides the same interface, minimally, and every serving module imports them from here only:
``Engine``/``Event`` (a heap loop over frozen events keyed (t_ns, priority, seq), seq owned by the
engine instance, handler returns follow-ups, nothing written) and ``CostModel``/``load_costs``
(the DOMAIN.md §3/§6 constants, the TOML layout of ``replay``'s cost files). **At merge time this
module's body becomes** ``from asaptrace.replay.engine import Engine, Event`` and
``from asaptrace.replay.costs import CostModel, load_costs``; the tests are written against the
behaviour, not this code.
"""

from __future__ import annotations

import heapq
import itertools
import math
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from asaptrace.errors import UsageError


# ------------------------------------------------------------------------------------- engine
@dataclass(frozen=True)
class Event:
    """Base of every event: when it happens; ``seq`` is stamped by the engine."""

    t_ns: int
    seq: int = field(default=-1, kw_only=True)
    priority: ClassVar[int] = 50


class Engine:
    """Pop the earliest event by (t_ns, priority, seq), hand it to the handler, push what it returns."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, int, Event]] = []
        self._seq = itertools.count()
        self.now_ns = 0
        self.handled = 0

    def push(self, event: Event) -> None:
        if event.t_ns < self.now_ns:
            raise ValueError(
                f"event {type(event).__name__} at {event.t_ns} ns is in the past ({self.now_ns})"
            )
        heapq.heappush(self._heap, (event.t_ns, event.priority, next(self._seq), event))

    def run(self, handler: Callable[[Event], Iterable[Event]], initial: Iterable[Event] = ()) -> int:
        for ev in initial:
            self.push(ev)
        heap, push = self._heap, self.push
        while heap:
            t, _, _, ev = heapq.heappop(heap)
            self.now_ns = t
            self.handled += 1
            for follow in handler(ev):
                push(follow)
        return self.now_ns


# --------------------------------------------------------------------------------- cost model
_NS_PER_MS = 1_000_000

#: TOML section → {key: CostModel field} (the layout of replay's cost files)
_LAYOUT: dict[str, dict[str, str]] = {
    "attention": {"c0_ms": "attn_c0_ms", "c1_ms": "attn_c1_ms", "c2_ms": "attn_c2_ms", "phi": "attn_phi"},
    "moe": {"plateau_ms": "moe_plateau_ms", "a_ms": "moe_a_ms", "b_ms": "moe_b_ms", "e_ref": "moe_e_ref"},
    "transfer": {"latency_ms": "xfer_latency_ms", "per_k_ms": "xfer_per_k_ms"},
    "coupled": {"k_s": "coupled_k_s"},
    "launch": {"per_item_ms": "launch_ms"},
}


@dataclass(frozen=True)
class CostModel:
    """Attention c0 + c1·[(1−φ)Σc + φΣc/n] + c2·Σc(2P+c); MoE max(plateau·r, a + b·r·N);
    transfer latency + per_k·t (per sending die); ms with tokens per 1K; methods return ns."""

    attn_c0_ms: float = 0.0
    attn_c1_ms: float = 1.41
    attn_c2_ms: float = 0.0215
    attn_phi: float = 0.0
    moe_plateau_ms: float = 0.55
    moe_a_ms: float = 0.23
    moe_b_ms: float = 0.286
    moe_e_ref: float = 32.0
    xfer_latency_ms: float = 0.19
    xfer_per_k_ms: float = 0.71
    coupled_k_s: float = 1.0
    launch_ms: float = 0.22
    source: str = "defaults (DOMAIN.md §3/§6)"

    def attention_ns(self, new_tokens: Any, prefix: Any = 0) -> int:
        c = np.atleast_1d(np.asarray(new_tokens, np.float64))
        p = np.broadcast_to(np.asarray(prefix, np.float64), c.shape)
        return int(self.attention_sums_ns(c.sum(), (c * (2 * p + c)).sum(), len(c)))

    def attention_sums_ns(self, tokens: Any, quad: Any, n_req: Any) -> np.ndarray:
        t = np.asarray(tokens, np.float64) / 1e3
        q = np.asarray(quad, np.float64) / 1e6
        n = np.maximum(np.asarray(n_req, np.float64), 1)
        ms = self.attn_c0_ms + self.attn_c1_ms * ((1 - self.attn_phi) * t + self.attn_phi * t / n)
        return _ns(ms + self.attn_c2_ms * q)

    def moe_ns(self, tokens: Any, experts: float, skew: Any = 1.0) -> np.ndarray:
        r = self.moe_e_ref / experts if self.moe_e_ref > 0 else 1.0
        n = np.asarray(tokens, np.float64) / 1e3
        return _ns(
            np.maximum(self.moe_plateau_ms * r, self.moe_a_ms + self.moe_b_ms * r * n * np.asarray(skew))
        )

    def transfer_ns(self, tokens_per_die: Any) -> np.ndarray:
        return _ns(self.xfer_latency_ms + self.xfer_per_k_ms * np.asarray(tokens_per_die, np.float64) / 1e3)

    @property
    def launch_ns(self) -> int:
        return int(_ns(self.launch_ms))


def _ns(ms: Any) -> np.ndarray:
    return np.rint(np.asarray(ms, np.float64) * _NS_PER_MS).astype(np.int64)


def load_costs(path: str | Path, *, base: CostModel | None = None) -> CostModel:
    """A cost TOML over ``base``; an unknown section or key is a one-line UsageError."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as e:
        raise UsageError(f"cannot read cost file ({e.strerror})", path=path) from None
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"not valid TOML ({e})", path=path) from None
    changes: dict[str, float] = {}
    for section, table in data.items():
        if section == "fit":
            continue
        keys = _LAYOUT.get(section)
        if keys is None or not isinstance(table, dict):
            raise UsageError(f"unknown section [{section}] (known: {', '.join(_LAYOUT)}, fit)", path=path)
        for key, value in table.items():
            if key not in keys:
                raise UsageError(f"unknown key {section}.{key} (known: {', '.join(keys)})", path=path)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise UsageError(f"{section}.{key} must be a finite number, not {value!r}", path=path)
            changes[keys[key]] = float(value)
    return replace(base or CostModel(), **changes, source=f"file {path.name}")
