"""A serving scenario: the workload, cost and SLO knobs of an online evaluation, loaded from TOML package data.

A scenario holds what is served (the model's layers, the request lengths, arrivals, the costs) and
the SLO it is judged by; *how* it is served — each deployment and its mechanisms (D×T, E, batch
budgets, chunk size, routing) — is the policy object's own settings
(:mod:`asaptrace.replay.policies`; ``sweep --set asap.experts=12``). The ASAP paper's evaluation
is ``scenarios/asap-paper.toml`` (DOMAIN.md §6, knob by knob) with the policies' defaults. A
scenario file must name every knob of :class:`Scenario` exactly once (an unknown or missing knob is
a one-line :class:`UsageError` naming the file), so the shipped file *is* the list of defaults.
Overrides come in three layers, later winning: the scenario file, a cost model TOML written by
``replay`` (:func:`asaptrace.replay.costs.load_costs`, ``--costs``), then ``--set KNOB=VALUE``.
The cost constants are :class:`asaptrace.replay.costs.CostModel`'s fields; ``cost_scale``
multiplies all of them (it is what ``--calibrate-ttft`` solves for).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

from asaptrace.errors import UsageError
from asaptrace.replay.costs import CostModel, read_costs
from asaptrace.replay.serving.lengths_fit import LengthTargets, LogLogistic, fit_log_logistic

#: cost knobs: the CostModel fields a scenario sets (all in ms except phi, tp_ref, e_ref, k_s); not
#: link contention, which the online serving does not model (replay.contention: offline only)
COST_KNOBS = tuple(
    f.name
    for f in fields(CostModel)
    if f.name not in ("attn_per_request_ms", "source", "xfer_contention", "parts")
    and not f.name.startswith(("whatif_", "mc_"))
)
#: cost knobs a scenario file may leave out: the per-die noise a store's fit measures (0: none)
OPTIONAL_KNOBS = ("attn_sigma", "moe_sigma", "xfer_sigma")
_SCALED = ("attn_c0_ms", "attn_c1_ms", "attn_c2_ms", "moe_plateau_ms", "moe_a_ms", "moe_b_ms")
_SCALED += ("xfer_latency_ms", "xfer_per_k_ms", "launch_ms")

#: the one table of knob spellings: a short name (the paper's symbol) → the scenario / CostModel field
#: it means; ``sweep --set`` reads it here, ``replay --vary`` maps its knobs through it (explore.py)
KNOB_ALIASES = {
    "k_s": "coupled_k_s",
    "e_ref": "moe_e_ref",
    "E_ref": "moe_e_ref",
    "phi": "attn_phi",
    "tp_ref": "attn_tp_ref",
    "φ": "attn_phi",
    "scale": "cost_scale",
}
#: old policy names kept working (the paper, and the sweep before one registry, said "default")
POLICY_ALIASES = {"default": "coupled"}


@dataclass(frozen=True)
class Scenario:
    """Every knob of a serving evaluation (DOMAIN.md §6; docs/sweep.md says what each one means)."""

    name: str
    layers: int
    #: the cost knobs (COST_KNOBS), held as the cost model itself: ``sc.attn_c1_ms`` reads it
    cost_model: CostModel
    cost_scale: float
    len_mean: float
    len_mode: float
    len_p90_at: float
    len_p98_at: float
    len_min: int
    len_max: int
    prefix_cache: bool
    duration_s: float
    slo_ttft_s: float
    seed: int
    cost_source: str = "scenario"
    #: the paper's reported numbers (printed beside ours, never used to set a knob)
    paper: tuple[tuple[str, Any], ...] = ()
    #: where a --costs file's constants came from (its header line, e.g. "fitted to STORE (…)")
    cost_origin: str = ""
    #: a --costs file's [fit.PART] quality tables (None: no file, or a file without them)
    cost_fit: dict[str, dict[str, Any]] | None = field(default=None, compare=False)
    #: cost knobs set by with_knobs (--set, --vary) after the scenario file and any --costs file
    cost_set: tuple[tuple[str, Any], ...] = ()

    def __getattr__(self, name: str) -> Any:
        """A cost knob by its CostModel name (``sc.moe_b_ms``); only asked when no field has it."""
        if name in COST_KNOBS and "cost_model" in self.__dict__:
            return getattr(self.__dict__["cost_model"], name)
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    @classmethod
    def of(cls, **values: Any) -> Scenario:
        """A scenario from flat knobs (the TOML's ``[knobs]``): cost knobs go into its cost model."""
        costs = {k: values.pop(k) for k in COST_KNOBS if k in values}
        return cls(**values, cost_model=CostModel(**costs))

    def _replaced(self, **changes: Any) -> Scenario:
        """A copy with knobs changed, cost knobs into the cost model."""
        costs = {k: changes.pop(k) for k in COST_KNOBS if k in changes}
        if costs:
            changes["cost_model"] = replace(self.cost_model, **costs)
        return replace(self, **changes)

    def __post_init__(self) -> None:
        if self.layers <= 0:
            raise UsageError(f"knob layers must be positive, not {self.layers}")
        if self.attn_tp_ref <= 0:
            raise UsageError(f"knob attn_tp_ref must be positive, not {self.attn_tp_ref}")
        if self.cost_scale <= 0 or self.duration_s <= 0 or self.slo_ttft_s <= 0:
            raise UsageError("knobs cost_scale, duration_s and slo_ttft_s must be positive")
        if not 0 <= self.attn_phi <= 1:
            raise UsageError(f"knob attn_phi must be in [0, 1], not {self.attn_phi}")
        if not 1 <= self.len_min < self.len_max:
            raise UsageError(f"knobs need 1 ≤ len_min < len_max (got {self.len_min}, {self.len_max})")

    # ------------------------------------------------------------------------------- derived
    @cached_property
    def costs(self) -> CostModel:
        """The cost model at ``cost_scale`` (every time constant multiplied by it)."""
        scaled = {k: getattr(self.cost_model, k) * self.cost_scale for k in _SCALED}
        return replace(self.cost_model, **scaled, source=f"{self.cost_source} × {self.cost_scale:g}")

    @cached_property
    def lengths(self) -> LogLogistic:
        """The fitted length distribution (truncated to [len_min, len_max])."""
        t = LengthTargets(
            self.len_mean, self.len_mode, self.len_p90_at, self.len_p98_at, self.len_min, self.len_max
        )
        return fit_log_logistic(t)

    def knobs(self) -> dict[str, Any]:
        """Every knob's value (what a result states it assumed)."""
        names = [n for f in fields(self) for n in (COST_KNOBS if f.name == "cost_model" else (f.name,))]
        return {k: getattr(self, k) for k in names if k not in _NOT_KNOBS}

    def paper_numbers(self) -> dict[str, Any]:
        """The paper's figures, keyed by our policy names (a scenario file may say ``default``)."""
        return {
            k: ({POLICY_ALIASES.get(p, p): x for p, x in v.items()} if isinstance(v, dict) else v)
            for k, v in self.paper
        }

    # ------------------------------------------------------------------------------ overrides
    def with_knobs(self, values: dict[str, Any]) -> Scenario:
        """A copy with knobs set; values may be strings (parsed by the knob's type)."""
        changes = {}
        for key, raw in values.items():
            name = knob_name(key)
            changes[name] = _parse(name, raw)
        cost_set = dict(self.cost_set) | {k: v for k, v in changes.items() if k in COST_KNOBS}
        return self._replaced(**changes, cost_set=tuple(cost_set.items()))

    def with_costs_file(self, path: str | Path) -> Scenario:
        """A copy whose cost constants come from a cost TOML (``replay``'s format)."""
        model, quality = read_costs(path, base=self.cost_model)
        if model.attn_per_request_ms:  # not a knob of the serving model: refuse rather than drop it
            raise UsageError("attention.per_request_ms is not used by the sweep (set it to 0)", path=path)
        return self.with_costs(model, quality, origin=_cost_file_origin(Path(path)))

    def with_costs(self, model: CostModel, quality: dict[str, Any] | None, *, origin: str | None) -> Scenario:
        """A copy whose cost constants are ``model``'s (e.g. fitted to a store), its fit quality kept."""
        return self._replaced(
            **{k: getattr(model, k) for k in COST_KNOBS},
            cost_source=model.source,
            cost_origin=origin,
            cost_fit=quality,
            cost_set=(),
        )


#: Scenario fields that are not knobs: the name, and where the costs came from (reported apart)
_NOT_KNOBS = ("paper", "cost_origin", "cost_fit", "cost_set")
#: the header line save_costs writes: "# asaptrace cost model (SOURCE); ms, …"
_COST_HEADER = re.compile(r"^# asaptrace cost model \((?P<source>.*)\); ms")


def _cost_file_origin(path: Path) -> str:
    """The source a cost file's header names (``fitted to STORE (…)``), or "" for a hand-written file."""
    first = path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
    m = _COST_HEADER.match(first)
    return m.group("source") if m else ""


def knob_names() -> list[str]:
    """Every knob, in the scenario file's order (the cost model's where it sits)."""
    out: list[str] = []
    for f in fields(Scenario):
        if f.name == "cost_model":
            out += COST_KNOBS
        elif f.name not in ("name", "cost_source", *_NOT_KNOBS):
            out.append(f.name)
    return out


def knob_name(key: str) -> str:
    """The knob a user's key means (aliases like k_s, E_ref, phi accepted); unknown → UsageError
    (a policy's setting, ``asap.experts`` or an old name like ``asap_experts``, is not a scenario
    knob: :func:`asaptrace.replay.policies.settings.setting_key` reads those)."""
    name = KNOB_ALIASES.get(key, key)
    if name not in knob_names():
        raise UsageError(
            f"unknown knob {key!r} (scenario knobs: {', '.join(knob_names())}; aliases: "
            f"{', '.join(KNOB_ALIASES)}; a policy's setting is POLICY.SETTING, e.g. asap.experts)"
        )
    return name


def is_knob(key: str) -> bool:
    """Whether ``key`` names a scenario knob (or an alias of one)."""
    return KNOB_ALIASES.get(key, key) in knob_names()


_TYPES = {f.name: f.type for f in fields(Scenario)} | {f.name: f.type for f in fields(CostModel)}


def _parse(name: str, raw: Any) -> Any:
    kind = _TYPES[name]
    if not isinstance(raw, str):
        value = raw
    elif kind == "bool":
        low = raw.strip().lower()
        if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            raise UsageError(f"knob {name} is true or false, not {raw!r}")
        return low in ("true", "1", "yes", "on")
    elif kind == "str":
        return raw.strip()
    else:
        try:
            value = float(raw)
        except ValueError:
            raise UsageError(f"knob {name} is a number, not {raw!r}") from None
    if kind == "int":
        if isinstance(value, bool) or float(value) != int(value):
            raise UsageError(f"knob {name} is a whole number, not {raw!r}")
        return int(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(f"knob {name} is a number, not {raw!r}")
        return float(value)
    if kind == "bool" and not isinstance(value, bool):
        raise UsageError(f"knob {name} is true or false, not {raw!r}")
    if kind == "str" and not isinstance(value, str):
        raise UsageError(f"knob {name} is a string, not {raw!r}")
    return value


def paper_for(paper: dict[str, Any], policies: tuple[str, ...]) -> dict[str, Any]:
    """The paper's per-policy figures also under the names swept by an alias (``default``)."""
    out = {}
    for k, v in paper.items():
        if isinstance(v, dict):
            v = v | {
                p: v[POLICY_ALIASES[p]] for p in policies if p in POLICY_ALIASES and POLICY_ALIASES[p] in v
            }
        out[k] = v
    return out


# --------------------------------------------------------------------------------------- loading
def shipped_scenarios() -> list[str]:
    root = resources.files("asaptrace.replay.serving").joinpath("scenarios")
    return sorted(p.name.removesuffix(".toml") for p in root.iterdir() if p.name.endswith(".toml"))


def load_scenario(name_or_path: str | Path = "asap-paper") -> Scenario:
    """A shipped scenario by name (``asap-paper``) or a scenario TOML file by path."""
    text_path = Path(name_or_path)
    if str(name_or_path) in shipped_scenarios():
        res = resources.files("asaptrace.replay.serving").joinpath(f"scenarios/{name_or_path}.toml")
        text, where = res.read_text(), f"scenario {name_or_path}"
    elif text_path.is_file():
        text, where = text_path.read_text(), str(text_path)
    else:
        known = ", ".join(shipped_scenarios())
        raise UsageError(f"unknown scenario {str(name_or_path)!r} (shipped: {known}; or a TOML file path)")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UsageError(f"not valid TOML ({e})", path=where) from None
    knobs = doc.get("knobs")
    if not isinstance(knobs, dict):
        raise UsageError("no [knobs] table", path=where)
    unknown = sorted(set(knobs) - set(knob_names()))
    missing = [k for k in knob_names() if k not in knobs and k not in OPTIONAL_KNOBS]
    if unknown or missing:
        what = "; ".join(
            s
            for s in (f"unknown knobs {unknown}" if unknown else "", f"missing {missing}" if missing else "")
            if s
        )
        raise UsageError(what, path=where)
    values = {k: _parse(k, v) for k, v in knobs.items()}
    name = str(doc.get("scenario", {}).get("name", text_path.stem))
    paper = tuple(sorted(doc.get("paper", {}).items()))
    return Scenario.of(name=name, **values, paper=paper)
