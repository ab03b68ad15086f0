"""The one place for asaptrace's exceptions.

Faces (CLI, dashboard) catch :class:`AsaptraceError` and print ``str(err)`` as one line with a
non-zero exit code; anything else is a bug and may show a traceback. Every message names the file
it is about (when there is one) and the cause, so the user knows what to fix.
"""

from __future__ import annotations

from pathlib import Path


class AsaptraceError(Exception):
    """Base of every error a user can cause (bad input, bad option, bad store)."""

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        self.path = None if path is None else str(path)
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


class IngestError(AsaptraceError):
    """A source file cannot be ingested."""


class UnsupportedFormat(IngestError):
    """The file is not in a format any registered ingester recognises."""


class CorruptTrace(IngestError):
    """The file claims a known format but cannot be read (truncated, invalid JSON, empty)."""


class SizeLimitExceeded(IngestError):
    """Decompressing the file would exceed the configured cap (a decompression bomb guard)."""


class RankError(IngestError):
    """The rank of a file cannot be determined, or two files claim the same rank."""


class StoreError(AsaptraceError):
    """A store cannot be opened or written."""


class StoreVersionError(StoreError):
    """The store was written by an incompatible format version."""


class AccountingError(AsaptraceError):
    """An identity that must hold (read == kept + rejected, a time breakdown) does not: a bug."""


class RegistryError(AsaptraceError):
    """An extension point was asked to register a taken name or look up an unknown one."""


class UsageError(AsaptraceError):
    """An option or argument has a value that cannot be used."""


class OutputError(UsageError):
    """An output path cannot be written (not a folder, under a file, read-only, /proc)."""
