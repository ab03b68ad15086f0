"""A bounded, thread-safe memo: each key computed once even when many requests ask for it at once.

The dashboard's server runs callbacks on a pool of threads (dashboards/server.py). A plain dict
cache there lets N requests for the same uncached key compute it N times at once — the case of
many tabs opening the same page — and an unlocked LRU can be reordered under a reader. Here the
first asker computes while later askers of the *same* key wait for its result; other keys go on
in parallel. Values are evicted least recently used first, past ``max_items`` or ``max_bytes``
(``size(value)`` bytes each). A failed computation is not kept: the next asker tries again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    """``get(key, compute)``: the cached value, else ``compute()`` once (see the module docstring)."""

    def __init__(
        self,
        *,
        max_items: int | None = None,
        max_bytes: int | None = None,
        size: Callable[[V], int] = lambda _v: 0,
        keep: Callable[[V], bool] = lambda _v: True,
    ) -> None:
        self.max_items, self.max_bytes, self._size, self._keep = max_items, max_bytes, size, keep
        self._values: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}
        self.computed = 0  # how many times a value was computed (for tests and benchmarks)

    def _lookup(self, key: Hashable) -> tuple[bool, V | None]:
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return True, self._values[key][0]
            return False, None

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        hit, value = self._lookup(key)
        if hit:
            return value  # type: ignore[return-value]
        with self._lock:
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:  # one computation per key at a time; later askers wait here
            hit, value = self._lookup(key)
            if hit:
                return value  # type: ignore[return-value]
            try:
                value = compute()
            except BaseException:
                with self._lock:
                    self._computing.pop(key, None)
                raise
            with self._lock:  # kept before the gate goes, so no new asker computes it again
                self.computed += 1
                if self._keep(value):
                    self._put(key, value)
                self._computing.pop(key, None)
            return value

    def _put(self, key: Hashable, value: V) -> None:
        nbytes = self._size(value)
        if self.max_bytes is not None and nbytes > self.max_bytes:
            return  # larger than the whole cache: served, not kept
        self._values[key] = (value, nbytes)
        self._bytes += nbytes
        while self._values and (
            (self.max_items is not None and len(self._values) > self.max_items)
            or (self.max_bytes is not None and self._bytes > self.max_bytes)
        ):
            _, (_, old) = self._values.popitem(last=False)
            self._bytes -= old

    def clear(self) -> None:
        """Forget every kept value (computations under way finish and are kept)."""
        with self._lock:
            self._values.clear()
            self._bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)
