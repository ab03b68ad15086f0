"""The simulated devices of a replay or a serving run: attention groups × TP plus expert dies.

A mechanics fact (how many dies run what), so the serving rules read it without the policies above
them; a policy says which deployment it simulates (``serve_deployment``, ``resolve_deployment``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Deployment:
    """The simulated devices: attention groups × TP plus expert dies (0: fused with attention)."""

    kind: str  # coupled | disaggregated
    groups: int
    tp: int
    experts: int

    @property
    def devices(self) -> int:
        return self.groups * self.tp + (self.experts if self.kind == "disaggregated" else 0)
