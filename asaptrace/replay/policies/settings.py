"""A policy's settings set by name from a face (``sweep --set asap.experts=12``, ``--vary``).

A setting key is one of:

* ``POLICY.SETTING`` — a field of the registered policy ``POLICY`` (``asap.experts``,
  ``chunked.chunk_tokens``, ``coupled.attention``); it applies to that policy and its named
  ablations (``asap.experts`` also sets ``asap-no-dual-batch``'s);
* ``SETTING`` — a field name alone (``chunk_tokens``, ``long_tokens``): every swept policy that has it;
* an old scenario knob (before a policy owned its deployment): ``asap_experts`` → the pipelined
  policies' ``experts``, ``asap_dp`` / ``asap_tp`` → the D / T of their ``attention``,
  ``default_dp`` / ``default_tp`` (``coupled_dp``, …) → the lockstep policies' ``attention``,
  ``asap_alone_tokens`` → ``long_tokens``, … (:data:`OLD_NAMES`).

An unknown key is a one-line :class:`UsageError` naming the forms. Values may be strings (parsed by
the field's type). :func:`apply_settings` returns the policy with every setting that reaches it.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from asaptrace.errors import UsageError
from asaptrace.registry import Registry
from asaptrace.replay.policies.base import LockstepPolicy, Policy, parse_attention
from asaptrace.replay.policies.pipelined_base import PipelinedPolicy

#: old scenario knob → (family the setting reaches, field, part: "d" / "t" of a D×T, or None)
OLD_NAMES: dict[str, tuple[type[Policy], str, str | None]] = {
    "asap_dp": (PipelinedPolicy, "attention", "d"),
    "asap_tp": (PipelinedPolicy, "attention", "t"),
    "asap_experts": (PipelinedPolicy, "experts", None),
    "asap_min_batch_tokens": (PipelinedPolicy, "min_batch_tokens", None),
    "asap_max_batch_tokens": (PipelinedPolicy, "max_batch_tokens", None),
    "asap_alone_tokens": (PipelinedPolicy, "long_tokens", None),
    "chunk_tokens": (LockstepPolicy, "chunk_tokens", None),
    **{
        f"{head}_{k}": (LockstepPolicy, "attention", k[0])
        for head in ("default", "coupled")
        for k in ("dp", "tp")
    },
    **{
        f"{head}_{k}": (Policy, k, None)  # afd-pingpong's steps too
        for head in ("default", "coupled")
        for k in ("step_tokens", "group_tokens")
    },
    **{
        f"{head}_{k}": (LockstepPolicy, k, None)
        for head in ("default", "coupled")
        for k in ("routing", "micro_batch_overlap")
    },
    "routing": (LockstepPolicy, "routing", None),
}


def setting_key(key: str, registry: Registry[type[Policy]]) -> str:
    """``key`` checked as a policy setting (one line naming the forms when it is none)."""
    if key in OLD_NAMES:
        return key
    head, dot, name = key.partition(".")
    if dot:
        if head not in registry:
            raise UsageError(
                f"unknown policy {head!r} in setting {key!r} (known: {', '.join(registry.names())})"
            )
        cls = registry.get(head)
        if name not in cls.param_names():
            raise UsageError(
                f"policy {head!r} has no setting {name!r} (it has: {', '.join(cls.param_names())})"
            )
        return key
    if any(key in cls.param_names() for _, cls in registry):
        return key
    raise UsageError(
        f"unknown knob or setting {key!r}: a scenario knob, POLICY.SETTING (asap.experts; `asaptrace "
        "policies` lists them) or an old scenario name such as asap_experts (docs/sweep.md lists all)"
    )


def reaches(key: str, pol: Policy) -> bool:
    """Whether setting ``key`` sets a field of ``pol`` (an old name: of its family)."""
    head, dot, name = key.partition(".")
    if key in OLD_NAMES:
        family, name, _ = OLD_NAMES[key]
        return isinstance(pol, family) and name in pol.param_names()
    if dot:
        return type(pol).name == head and name in pol.param_names()
    return key in pol.param_names()


def is_setting(key: str, registry: Registry[type[Policy]]) -> bool:
    try:
        setting_key(key, registry)
    except UsageError:
        return False
    return True


def apply_settings(pol: Policy, settings: dict[str, Any] | tuple[tuple[str, Any], ...]) -> Policy:
    """``pol`` with every setting that reaches it (in order, later winning)."""
    for key, raw in dict(settings).items():
        if not reaches(key, pol):
            continue
        name, part = OLD_NAMES[key][1:] if key in OLD_NAMES else (key.partition(".")[2] or key, None)
        pol = _set(pol, name, raw, part)
    return pol


def _set(pol: Policy, name: str, raw: Any, part: str | None) -> Policy:
    if part is not None:  # one side of a D×T
        current = getattr(pol, name) or type(pol).serve_attention  # type: ignore[attr-defined]
        d, t = parse_attention(current)
        n = _parse(pol, "int", name, raw)
        if n < 1:
            raise UsageError(f"{pol.name} attention {'D' if part == 'd' else 'T'} must be positive, not {n}")
        return replace(pol, **{name: f"{n}x{t}" if part == "d" else f"{d}x{n}"})
    kind = next(str(f.type) for f in fields(pol) if f.name == name)
    return replace(pol, **{name: _parse(pol, kind, name, raw)})


def _parse(pol: Policy, kind: str, name: str, raw: Any) -> Any:
    """A setting's value by its field's type (``int | None`` is an int, ``str | None`` a string)."""
    base = kind.split("|")[0].strip()
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    try:
        if base == "bool":
            low = text.lower()
            if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                raise ValueError
            return low in ("true", "1", "yes", "on")
        if base == "int":
            x = float(text)
            if x != int(x):
                raise ValueError
            return int(x)
        if base == "float":
            return float(text)
    except ValueError:
        word = {"bool": "true or false", "int": "a whole number", "float": "a number"}[base]
        raise UsageError(f"{pol.name} setting {name} is {word}, not {raw!r}") from None
    return text


def policy_params(spec: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The parameters ``settings`` give policy ``spec`` (``replay --set``; each value parsed by its
    field's type): a key must name a setting of this policy (one line naming its settings when not)."""
    from asaptrace.replay.policies import POLICIES, policy_of  # the registry sits above this module

    pol = policy_of(spec)
    registry_cls = type(pol)
    out: dict[str, Any] = {}
    for key, raw in settings.items():
        setting_key(key, POLICIES)  # an unknown policy or setting: one line naming the forms
        if not reaches(key, pol):
            head, dot, name = key.partition(".")
            what = (
                f"{key!r} is a setting of {head}, not of {spec}"
                if dot
                else f"policy {spec!r} has no parameter {key}"
            )
            raise UsageError(f"{what} (it has: {', '.join(registry_cls.param_names())})")
        pol = apply_settings(pol, {key: raw})
        name = OLD_NAMES[key][1] if key in OLD_NAMES else (key.partition(".")[2] or key)
        out[name] = getattr(pol, name)
    return out
