"""Policies: one module each, registered in :data:`POLICIES` like a plugin would be.

The one registry of the project's policies, offline (``replay``: :meth:`Policy.run` on a store's
measured work) and online (``sweep``: :meth:`Policy.serve`, its online former on a request
stream). A policy's module holds all of it: its settings (the dataclass's fields), its offline hook
and its online former (``online_former``, with hooks ``order``, ``admit`` and, lockstep,
``form_step``). A user policy subclasses :class:`LockstepPolicy` or :class:`PipelinedPolicy` (or a
built-in), overrides its hooks and calls :func:`register_policy`; a taken name raises.
docs/policies.md adds a whole 'shortest-first' policy.

A policy is named by a spec (:func:`policy_of`): its registered name (``asap``), or name-variant
for a named ablation (``asap-no-dual-batch`` = ``asap`` with ``dual_batch=False``); ``default``
is the sweep's old name of ``coupled`` (kept as an alias).

Modules, in the order data flows through them:

* :mod:`~asaptrace.replay.policies.base` — ``Policy``, ``LockstepPolicy``, ``Deployment``,
  ``PolicyRun``: what every policy has (fields, label, answers, the lockstep run);
* :mod:`~asaptrace.replay.policies.lockstep_online` — the lockstep family's online loop and its
  former (``LockstepFormer``: coupled's FIFO steps; a policy overrides its hooks);
* :mod:`~asaptrace.replay.policies.lockstep_cost` — what one online lockstep step costs, kept by
  its parts (each group's pieces, the step's tokens) across steps, rates and seeds;
* :mod:`~asaptrace.replay.policies.pipelined_online` — the pipelined family's online loop
  (``OnlineFormer``, ``serve_on_pipeline``);
* :mod:`~asaptrace.replay.policies.pipelined_base` — ``PipelinedPolicy``: the disaggregated run on
  the pipeline, its deployment and bounds;
* one module per policy, each its fields, its offline hook and its online former:
  :mod:`~asaptrace.replay.policies.coupled`, :mod:`~asaptrace.replay.policies.balanced`,
  :mod:`~asaptrace.replay.policies.chunked`, :mod:`~asaptrace.replay.policies.asap`,
  :mod:`~asaptrace.replay.policies.afd_pingpong`;
* :mod:`~asaptrace.replay.policies.settings` — a policy's settings set by name from a face
  (``replay --set``, ``sweep --set asap.experts=12``, ``--vary``).

A new policy: its module here, its test, and one ``register_policy`` line below.
"""

from __future__ import annotations

import sys
from typing import Any

from asaptrace.errors import UsageError
from asaptrace.registry import Registry
from asaptrace.replay.mechanics.deployment import Deployment
from asaptrace.replay.policies.afd_pingpong import AfdPingpong
from asaptrace.replay.policies.asap import Asap
from asaptrace.replay.policies.balanced import Balanced
from asaptrace.replay.policies.base import LockstepPolicy, Policy, PolicyRun, resolve_deployment
from asaptrace.replay.policies.chunked import Chunked
from asaptrace.replay.policies.coupled import Coupled
from asaptrace.replay.policies.pipelined_base import PipelinedPolicy
from asaptrace.replay.serving.scenario import POLICY_ALIASES

POLICIES: Registry[type[Policy]] = Registry("policy")


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Register a policy class under its ``name`` (usable as a decorator)."""
    POLICIES.register(cls.name, cls)
    return cls


for _cls in (Coupled, Asap, Balanced, AfdPingpong, Chunked):
    register_policy(_cls)

ALIASES = POLICY_ALIASES


def _split_spec(spec: str) -> tuple[type[Policy], dict[str, Any]]:
    """A spec's class and its named ablation's parameters (unknown: RegistryError listing names)."""
    spec = ALIASES.get(spec, spec)
    if spec in POLICIES:
        return POLICIES.get(spec), {}
    for name, cls in POLICIES:
        for variant, params in cls.variants.items():
            if spec == f"{name}-{variant}":
                return cls, dict(params)
    POLICIES.get(spec)  # raises, naming the known policies
    raise AssertionError(spec)


def policy_of(spec: str, params: dict[str, Any] | None = None) -> Policy:
    """The policy a spec names, with ``params`` over its named ablation's (None values: defaults;
    an unknown parameter: UsageError naming the policy's)."""
    cls, base = _split_spec(spec)
    given = {k: v for k, v in (params or {}).items() if v is not None}
    unknown = sorted(set(given) - set(cls.param_names()))
    if unknown:
        raise UsageError(
            f"policy {spec!r} has no parameter {', '.join(unknown)} (it has: {', '.join(cls.param_names())})"
        )
    return cls(**(base | given))


def catalogue() -> list[dict[str, Any]]:
    """Every registered policy for a face's form or listing: name, family, whether it serves
    online, its named ablations, its parameters with their defaults (``online_params``: those only
    its online former reads; ``kinds``: each one's type; ``form``: those a form offers, with what
    it says), its docstring's first line, and what ``advise`` reads of it (its
    label, the findings it answers, the settings its search tries)."""
    from dataclasses import MISSING, fields

    out = []
    for name, cls in POLICIES:
        # the policy module's first line says what it is (a dataclass's own __doc__ is its signature)
        para = (sys.modules[cls.__module__].__doc__ or "").strip().split("\n\n")[0]
        summary = " ".join(para.split()).removeprefix(f"``{name}``: ")
        out.append(
            {
                "name": name,
                "family": cls.family,
                "online": cls.online(),
                "variants": {f"{name}-{v}": p for v, p in cls.variants.items()},
                "params": {f.name: (None if f.default is MISSING else f.default) for f in fields(cls)},
                "online_params": [f.name for f in fields(cls) if f.metadata.get("online")],
                # the schema a face generates its form from: each setting's type, and what a form says
                "kinds": {f.name: str(f.type) for f in fields(cls)},
                "form": {f.name: f.metadata["form"] for f in fields(cls) if "form" in f.metadata},
                "summary": summary,
                "label": cls.label or name,
                "answers": list(cls.answers),
                "search": {k: list(v) for k, v in cls.search_settings.items()}
                | ({"split": "every D×T + E of the store's devices"} if cls.searches_split else {}),
            }
        )
    return out


def policy_specs(*, online: bool | None = None) -> list[str]:
    """Every registered name and named ablation (``online=True``: only those the sweep can serve)."""
    out = []
    for name, cls in POLICIES:
        if online is None or cls.online() == online:
            out += [name, *(f"{name}-{v}" for v in cls.variants)]
    return out


__all__ = [
    "ALIASES",
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
    "catalogue",
    "policy_of",
    "policy_specs",
    "register_policy",
    "resolve_deployment",
]
