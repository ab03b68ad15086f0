"""Event accounting: every event read is either kept (in some table) or rejected with a reason.

``read == kept + Σ rejected`` is checked whenever an ingest result is built or merged; a mismatch is
a bug in an ingester and raises :class:`AccountingError` instead of silently losing events.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from asaptrace.errors import AccountingError


@dataclass
class Accounting:
    """Counts for one source file or a whole store."""

    read: int = 0
    kept: Counter[str] = field(default_factory=Counter)  # table -> rows that events became
    rejected: Counter[str] = field(default_factory=Counter)  # reason -> events

    @property
    def kept_total(self) -> int:
        return sum(self.kept.values())

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())

    def check(self, where: str = "") -> Accounting:
        if self.read != self.kept_total + self.rejected_total:
            raise AccountingError(
                f"event accounting does not balance{' for ' + where if where else ''}: read {self.read} "
                f"!= kept {self.kept_total} + rejected {self.rejected_total}"
            )
        return self

    def merge(self, other: Accounting) -> Accounting:
        return Accounting(
            read=self.read + other.read,
            kept=self.kept + other.kept,
            rejected=self.rejected + other.rejected,
        )

    def to_json(self) -> dict:
        return {
            "read": self.read,
            "kept": self.kept_total,
            "kept_by_table": dict(sorted(self.kept.items())),
            "rejected": dict(sorted(self.rejected.items())),
        }

    @classmethod
    def from_json(cls, obj: dict) -> Accounting:
        return cls(
            read=int(obj["read"]),
            kept=Counter({k: int(v) for k, v in obj.get("kept_by_table", {}).items()}),
            rejected=Counter({k: int(v) for k, v in obj.get("rejected", {}).items()}),
        )
