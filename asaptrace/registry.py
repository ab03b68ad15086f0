"""One small registry type for every extension point (ingest formats, taxonomy profiles, policies…).

Built-ins register through the same call a user extension uses; registering a taken name raises,
and looking up an unknown name raises with the list of known names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

from asaptrace.errors import RegistryError

T = TypeVar("T")


class Registry(Generic[T]):
    """A name → object table that refuses duplicates."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._items: dict[str, T] = {}

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise RegistryError(f"{self._what} {name!r} is already registered")
        self._items[name] = item
        return item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise RegistryError(f"unknown {self._what} {name!r} (known: {known})") from None

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return iter(list(self._items.items()))
