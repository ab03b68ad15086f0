"""Replay policies: one small module each, registered in :data:`POLICIES` like a plugin would be.

A user policy subclasses :class:`LockstepPolicy` or :class:`PipelinedPolicy`, overrides its hook
and calls :func:`register_policy`; a taken name raises.
"""

from __future__ import annotations

from asaptrace.registry import Registry
from asaptrace.replay.policies._base import (
    Deployment,
    LockstepPolicy,
    PipelinedPolicy,
    Policy,
    PolicyRun,
    resolve_deployment,
)
from asaptrace.replay.policies.afd_pingpong import AfdPingpong
from asaptrace.replay.policies.asap import Asap
from asaptrace.replay.policies.balanced import Balanced
from asaptrace.replay.policies.chunked import Chunked
from asaptrace.replay.policies.coupled import Coupled

POLICIES: Registry[type[Policy]] = Registry("replay policy")


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Register a policy class under its ``name`` (usable as a decorator)."""
    POLICIES.register(cls.name, cls)
    return cls


for _cls in (Coupled, Asap, Balanced, AfdPingpong, Chunked):
    register_policy(_cls)

__all__ = [
    "POLICIES",
    "AfdPingpong",
    "Asap",
    "Balanced",
    "Chunked",
    "Coupled",
    "Deployment",
    "LockstepPolicy",
    "PipelinedPolicy",
    "Policy",
    "PolicyRun",
    "register_policy",
    "resolve_deployment",
]
