"""What a serving rule reads of its policy, as protocols.

Serving sits below the policies (a policy's ``serve()`` hook calls its rule,
:mod:`asaptrace.replay.policies`), so a rule names the settings it reads instead of importing the
policy class; any policy with these settings can serve on the rule.
"""

from __future__ import annotations

from typing import Protocol

from asaptrace.replay.mechanics.deployment import Deployment


class LockstepSettings(Protocol):
    """coupled and balanced (a ``LockstepPolicy``): steps of ``step_tokens`` on D groups of T dies."""

    @property
    def step_tokens(self) -> int: ...
    @property
    def group_tokens(self) -> int: ...
    @property
    def routing(self) -> str: ...
    @property
    def micro_batch_overlap(self) -> bool: ...
    def serve_groups(self) -> tuple[int, int]: ...


class ChunkedSettings(LockstepSettings, Protocol):
    """chunked prefill: a lockstep policy that cuts prompts into ``chunk_tokens`` pieces."""

    @property
    def chunk_tokens(self) -> int: ...


class PipelinedSettings(Protocol):
    """A disaggregated policy on the pipeline (``PipelinedPolicy``)."""

    name: str

    def serve_deployment(self) -> Deployment: ...
    def live_experts(self, dep: Deployment) -> int: ...


class AsapSettings(PipelinedSettings, Protocol):
    """asap: batches of ``min_batch_tokens``..``max_batch_tokens``, dual-batch slots, overlap."""

    @property
    def min_batch_tokens(self) -> int: ...
    @property
    def max_batch_tokens(self) -> int: ...
    @property
    def long_tokens(self) -> int: ...
    @property
    def dual_batch(self) -> bool: ...
    @property
    def overlap(self) -> bool: ...
    @property
    def super_kernel(self) -> bool: ...
    def slots(self) -> int: ...


class AfdSettings(PipelinedSettings, Protocol):
    """afd-pingpong: ``m`` micro-batches of a ``step_tokens`` step ping-ponging with the FFN pool."""

    @property
    def m(self) -> int: ...
    @property
    def step_tokens(self) -> int: ...
