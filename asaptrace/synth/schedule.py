"""Batch formation for synth runs: the replay's batch planner (:mod:`asaptrace.replay.mechanics.planner`)."""

from __future__ import annotations

from asaptrace.replay.mechanics.planner import (
    StepPlan,
    admit,
    balance,
    new_tokens,
    plan_coupled,
    plan_disaggregated,
)

__all__ = ["StepPlan", "admit", "balance", "new_tokens", "plan_coupled", "plan_disaggregated"]
