"""One small registry type for every extension point (ingest formats, taxonomy profiles, policies…).

Built-ins register through the same call a user extension uses; registering a taken name raises,
and looking up an unknown name raises with the list of known names.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Generic, TypeVar

from asaptrace.errors import RegistryError

T = TypeVar("T")


class Registry(Generic[T]):
    """A name → object table that refuses duplicates.

    ``builtins``, when given, names the modules that register the built-in entries (as a plugin's
    entry point names its module): they are imported by the first lookup (not by
    :meth:`register`), so importing the registry does not import what it holds — the ingest
    formats' readers pull in numpy, pyarrow and polars, which ``asaptrace ingest`` imports while
    its first files are already being read (:mod:`asaptrace.ingest.kineto.prefetch`).
    """

    def __init__(self, what: str, builtins: tuple[str, ...] = ()) -> None:
        self._what = what
        self._items: dict[str, T] = {}
        self._builtins = builtins

    def _loaded(self) -> dict[str, T]:
        if self._builtins:
            modules, self._builtins = self._builtins, ()
            for module in modules:
                importlib.import_module(module)
        return self._items

    def register(self, name: str, item: T) -> T:
        if name in self._items:
            raise RegistryError(f"{self._what} {name!r} is already registered")
        self._items[name] = item
        return item

    def unregister(self, name: str) -> None:
        """Remove an entry (a test's, or a plugin being unloaded); unknown names are ignored."""
        self._items.pop(name, None)

    def get(self, name: str) -> T:
        try:
            return self._loaded()[name]
        except KeyError:
            known = ", ".join(sorted(self._items)) or "none"
            raise RegistryError(f"unknown {self._what} {name!r} (known: {known})") from None

    def names(self) -> list[str]:
        return list(self._loaded())

    def __contains__(self, name: object) -> bool:
        return name in self._loaded()

    def __iter__(self) -> Iterator[tuple[str, T]]:
        return iter(list(self._loaded().items()))
