"""The op taxonomy: ordered regex rules, per profile, that say what a device event does (its kind).

The vocabulary is data, not code (STYLE rule 6): each profile is a TOML file in
``asaptrace/enrich/rules/`` (``deepep``, ``nccl``, ``ascend``, ``trtllm``, ``triton_moe``, ``aiter``,
``vllm``, ``sglang``, ``moe_modules``, plus ``common``
which is always applied last). A file looks like::

    [profile]
    name = "deepep"
    version = 1
    description = "DeepEP dispatch/combine kernels"
    detect = ['deep_ep::', 'dpsk::ep::']     # selected when any event name matches one of these
    step_annotations = ['^prefill_step#(\\d+)$']   # optional: names of step spans (group 1 = step)
    layer_annotations = ['^layer#(\\d+)$']         # optional: names of layer spans (group 1 = layer)

    [[rule]]
    match = '(deep_ep|dpsk::ep)::\\w+::dispatch'   # Python regex, searched in the event name
    kind = "dispatch"
    context = 'shared_expert'   # optional: regex searched in the enclosing annotations' names

    [[step]]                    # a step annotation that says the step's phase and batch
    match = '^step\\[(?P<mode>[A-Z_]+)[^\\]]*?bs=(?P<requests>\\d+)[^\\]]*?toks=(?P<tokens>\\d+)'
    modes = { EXTEND = "prefill", DECODE = "decode", MIXED = "mixed" }   # or: phase = "prefill"

    [[marker]]                  # an event name that says what the run does (training)
    match = '^autograd::engine::evaluate_function'
    phase = "training"

A ``[[step]]`` regex's named groups (all optional) are read by :mod:`asaptrace.enrich.phases`:
``step`` (the step's number), ``mode`` (looked up in ``modes``), ``requests``/``tokens`` (the
batch, phase from ``mode`` or ``phase``), ``prefill_requests``/``prefill_tokens``/``prefill_context``/
``prefill_sumsq`` and ``decode_requests``/``decode_tokens``/``decode_context`` (a split batch; the
phase follows from which part is non-empty).

Profiles are selected from what the trace contains (a profile whose ``detect`` patterns match no
event name is left out), and a user's file (``--taxonomy FILE``) goes first so its rules win.
The first rule that matches decides; a name no rule matches keeps the kind its profiler category
gave it (``compute``, ``memcpy``, ``other``). Communication is recognised by these rules, never by
a name prefix alone.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from asaptrace.errors import UsageError
from asaptrace.info import PHASES
from asaptrace.registry import Registry
from asaptrace.schema import KINDS, Kind
from asaptrace.userfiles import read_text

#: Kinds a rule may assign (annotation and host come from the event category, not from names).
RULE_KINDS = frozenset(KINDS) - {Kind.ANNOTATION, Kind.HOST}
#: Order in which built-in profiles are tried when several are selected (most specific first).
BUILTIN_ORDER = (
    "deepep",
    "ascend",
    "trtllm",
    "triton_moe",
    "aiter",
    "vllm",
    "sglang",
    "nccl",
    "moe_modules",
    "common",
)

_PROFILE_KEYS = {
    "name",
    "version",
    "description",
    "detect",
    "step_annotations",
    "layer_annotations",
    "always",
}
_RULE_KEYS = {"match", "kind", "context"}
_STEP_KEYS = {"match", "phase", "modes"}
_MARKER_KEYS = {"match", "phase"}
#: What a ``[[step]]`` regex's named groups may count (besides ``step`` and ``mode``).
STEP_COUNTS = (
    "requests",
    "tokens",
    "prefill_requests",
    "prefill_tokens",
    "prefill_context",
    "prefill_sumsq",
    "decode_requests",
    "decode_tokens",
    "decode_context",
)
#: Named groups a ``[[step]]`` regex may use.
STEP_GROUPS = frozenset({"step", "mode", *STEP_COUNTS})


@dataclass(frozen=True)
class Rule:
    """Events whose name matches ``match`` (and whose annotation context matches ``context``) get ``kind``."""

    match: re.Pattern[str]
    kind: str
    context: re.Pattern[str] | None
    profile: str

    def applies(self, name: str, context: str) -> bool:
        if self.context is not None and not self.context.search(context):
            return False
        return self.match.search(name) is not None


@dataclass(frozen=True)
class StepRule:
    """A step annotation whose name says the step's phase and batch (see the module docstring)."""

    match: re.Pattern[str]
    phase: str | None
    modes: tuple[tuple[str, str], ...]
    profile: str


@dataclass(frozen=True)
class Marker:
    """An event name that marks the whole run's phase (e.g. backward ops: training)."""

    match: re.Pattern[str]
    phase: str
    profile: str


@dataclass(frozen=True)
class Profile:
    """One rule file, validated."""

    name: str
    version: int
    description: str
    detect: tuple[re.Pattern[str], ...]
    rules: tuple[Rule, ...]
    step_annotations: tuple[re.Pattern[str], ...] = ()
    layer_annotations: tuple[re.Pattern[str], ...] = ()
    always: bool = False
    source: str = ""
    steps: tuple[StepRule, ...] = ()
    markers: tuple[Marker, ...] = ()

    def detected_in(self, names: Sequence[str]) -> bool:
        return any(p.search(n) for p in self.detect for n in names)


@dataclass(frozen=True)
class Taxonomy:
    """The profiles in force, in the order their rules are tried."""

    profiles: tuple[Profile, ...]

    @property
    def label(self) -> str:
        """What meta.json records, e.g. ``deepep+nccl+common``."""
        return "+".join(p.name for p in self.profiles)

    @property
    def rules(self) -> tuple[Rule, ...]:
        return tuple(r for p in self.profiles for r in p.rules)

    @property
    def step_annotations(self) -> tuple[re.Pattern[str], ...]:
        return tuple(x for p in self.profiles for x in p.step_annotations)

    @property
    def layer_annotations(self) -> tuple[re.Pattern[str], ...]:
        return tuple(x for p in self.profiles for x in p.layer_annotations)

    @property
    def step_rules(self) -> tuple[StepRule, ...]:
        return tuple(x for p in self.profiles for x in p.steps)

    @property
    def markers(self) -> tuple[Marker, ...]:
        return tuple(x for p in self.profiles for x in p.markers)

    def kind_of(self, name: str, context: str = "") -> str | None:
        """The kind of the first rule that applies, or None."""
        for rule in self.rules:
            if rule.applies(name, context):
                return rule.kind
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "profiles": [{"name": p.name, "version": p.version, "source": p.source} for p in self.profiles],
        }


def _patterns(value: Any, where: str, path: str) -> tuple[re.Pattern[str], ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where} must be a regex string or a list of them", path=path)
    return tuple(_compile(v, where, path) for v in value)


def _compile(text: str, where: str, path: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as err:
        raise UsageError(f"{where}: bad regex {text!r} ({err})", path=path) from None


def parse_profile(doc: dict[str, Any], *, source: str) -> Profile:
    """Validate a decoded rule file; any mistake is one :class:`UsageError` naming the file."""
    head = doc.get("profile")
    if not isinstance(head, dict):
        raise UsageError("rule file lacks a [profile] table", path=source)
    unknown = set(doc) - {"profile", "rule", "step", "marker"}
    if unknown:
        raise UsageError(
            f"unknown top-level keys {sorted(unknown)} (expected [profile], [[rule]], [[step]], [[marker]])",
            path=source,
        )
    bad = set(head) - _PROFILE_KEYS
    if bad:
        raise UsageError(
            f"[profile] has unknown keys {sorted(bad)} (known: {sorted(_PROFILE_KEYS)})", path=source
        )
    name = head.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", name):
        raise UsageError("[profile] name must be a lower-case word", path=source)
    version = head.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise UsageError("[profile] version must be a positive integer", path=source)
    always = head.get("always", False)
    if not isinstance(always, bool):
        raise UsageError("[profile] always must be true or false", path=source)
    raw_rules = doc.get("rule", [])
    if not isinstance(raw_rules, list):
        raise UsageError("rules must be written as [[rule]] tables", path=source)
    rules = []
    for i, raw in enumerate(raw_rules, 1):
        where = f"rule {i}"
        if not isinstance(raw, dict):
            raise UsageError(f"{where} is not a table", path=source)
        bad = set(raw) - _RULE_KEYS
        if bad:
            raise UsageError(
                f"{where} has unknown keys {sorted(bad)} (known: {sorted(_RULE_KEYS)})", path=source
            )
        kind = raw.get("kind")
        if kind not in RULE_KINDS:
            raise UsageError(f"{where}: kind {kind!r} is not one of {sorted(RULE_KINDS)}", path=source)
        if not isinstance(raw.get("match"), str):
            raise UsageError(f"{where} lacks a 'match' regex", path=source)
        context = raw.get("context")
        if context is not None and not isinstance(context, str):
            raise UsageError(f"{where}: context must be a regex string", path=source)
        rules.append(
            Rule(
                match=_compile(raw["match"], where, source),
                kind=str(kind),
                context=None if context is None else _compile(context, where, source),
                profile=name,
            )
        )
    steps, markers = _step_rules(doc, name, source)
    return Profile(
        name=name,
        version=version,
        description=str(head.get("description", "")),
        detect=_patterns(head.get("detect", []), "[profile] detect", source),
        rules=tuple(rules),
        step_annotations=_patterns(head.get("step_annotations", []), "[profile] step_annotations", source),
        layer_annotations=_patterns(head.get("layer_annotations", []), "[profile] layer_annotations", source),
        always=always,
        source=source,
        steps=steps,
        markers=markers,
    )


def _tables(doc: dict[str, Any], key: str, keys: set[str], source: str) -> list[dict[str, Any]]:
    raw = doc.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise UsageError(f"{key}s must be written as [[{key}]] tables", path=source)
    for i, r in enumerate(raw, 1):
        bad = set(r) - keys
        if bad:
            raise UsageError(f"{key} {i} has unknown keys {sorted(bad)} (known: {sorted(keys)})", path=source)
        if not isinstance(r.get("match"), str):
            raise UsageError(f"{key} {i} lacks a 'match' regex", path=source)
    return raw


def _phase(value: Any, where: str, source: str) -> str:
    if value not in PHASES:
        raise UsageError(f"{where}: phase {value!r} is not one of {list(PHASES)}", path=source)
    return str(value)


def _step_rules(
    doc: dict[str, Any], name: str, source: str
) -> tuple[tuple[StepRule, ...], tuple[Marker, ...]]:
    """The ``[[step]]`` and ``[[marker]]`` tables of a rule file, validated."""
    steps = []
    for i, raw in enumerate(_tables(doc, "step", _STEP_KEYS, source), 1):
        where = f"step {i}"
        pat = _compile(raw["match"], where, source)
        unknown = set(pat.groupindex) - STEP_GROUPS
        if unknown:
            raise UsageError(
                f"{where}: unknown named groups {sorted(unknown)} (known: {sorted(STEP_GROUPS)})", path=source
            )
        modes = raw.get("modes", {})
        if not isinstance(modes, dict):
            raise UsageError(f"{where}: modes must be a table of mode = phase", path=source)
        phase = raw.get("phase")
        steps.append(
            StepRule(
                match=pat,
                phase=None if phase is None else _phase(phase, where, source),
                modes=tuple((str(k), _phase(v, where, source)) for k, v in modes.items()),
                profile=name,
            )
        )
    markers = tuple(
        Marker(
            match=_compile(raw["match"], f"marker {i}", source),
            phase=_phase(raw.get("phase"), f"marker {i}", source),
            profile=name,
        )
        for i, raw in enumerate(_tables(doc, "marker", _MARKER_KEYS, source), 1)
    )
    return tuple(steps), markers


def load_profile(path: str | Path) -> Profile:
    """Read and validate one rule file."""
    path = Path(path)
    try:
        doc = tomllib.loads(read_text(path, "taxonomy file"))
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"not valid TOML ({err})", path=path) from None
    return parse_profile(doc, source=str(path))


#: The built-in profiles, registered through the same call a user extension would use.
PROFILES: Registry[Profile] = Registry("taxonomy profile")


def register_profile(profile: Profile) -> Profile:
    return PROFILES.register(profile.name, profile)


def _register_builtins() -> None:
    rules_dir = resources.files("asaptrace.enrich") / "rules"
    for name in BUILTIN_ORDER:
        res = rules_dir / f"{name}.toml"
        register_profile(parse_profile(tomllib.loads(res.read_text()), source=f"builtin:{name}"))


_register_builtins()


def select_taxonomy(
    names: Iterable[str],
    *,
    profiles: Sequence[str] | None = None,
    user: Profile | str | Path | None = None,
) -> Taxonomy:
    """The taxonomy for a trace whose event names are ``names``.

    ``profiles`` forces a list of built-in profile names (the always-on ones are added); otherwise
    every built-in whose ``detect`` patterns match some name is selected. ``user`` (a rule file or
    a loaded profile) is put first, so its rules take precedence.
    """
    names = list(dict.fromkeys(names))
    head: list[Profile] = []
    if user is not None:
        head.append(user if isinstance(user, Profile) else load_profile(user))
    if profiles is not None:
        head += [PROFILES.get(p) for p in profiles]
    picked = {p.name for p in head}
    detected = [
        prof
        for name, prof in PROFILES
        if name not in picked and not prof.always and profiles is None and prof.detected_in(names)
    ]
    always = [prof for name, prof in PROFILES if name not in picked and prof.always]
    chosen = head + detected + always
    return Taxonomy(tuple(chosen))


def classify(
    taxonomy: Taxonomy, names: Sequence[str], contexts: Sequence[str] | None = None
) -> list[str | None]:
    """The rule kind for each (name, context) pair, None where no rule applies.

    Callers pass unique pairs (a trace has few distinct names), so this loop is not per event.
    """
    ctx = contexts if contexts is not None else [""] * len(names)
    return [taxonomy.kind_of(n, c) for n, c in zip(names, ctx, strict=True)]
