"""Configuration of a synthetic run: model, deployment, costs, straggler, clocks, workload, run.

A configuration is the dataclass defaults, overlaid by a built-in preset (``presets/NAME.toml``),
overlaid by the user's TOML file, overlaid by command-line options. Every TOML table maps to one
dataclass below and every key to one field; an unknown table or key is a one-line
:class:`UsageError` naming the file, so a typo never silently falls back to a default.
Cost figures are the DOMAIN.md §3 fits to the ASAP paper (Ascend 910, DeepSeek-V3.2), in ms.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from asaptrace.errors import UsageError
from asaptrace.userfiles import read_text
from asaptrace.workload.requests import WorkloadConfig

#: keys added after runs were bundled: written only when set, so an earlier run's config.toml stays
#: byte-identical when regenerated
_OMITTED_AT_DEFAULT = {("costs", "contention"), ("run", "noise_seed")}


@dataclass(frozen=True)
class ModelConfig:
    """DeepSeek-V3-class defaults."""

    layers: int = 61
    dense_layers: int = 3  # the first layers have a dense MLP instead of MoE
    hidden: int = 7168
    experts: int = 256  # routed experts (one shared expert besides)
    top_k: int = 8


@dataclass(frozen=True)
class DeploymentConfig:
    """Coupled ``dp × tp`` attention with EP over the same devices, or ASAP ``D×T + E``."""

    mode: str = "coupled"  # coupled | disaggregated
    dp: int = 8  # coupled: DP groups
    tp: int = 4  # coupled: TP members per group (EP = dp × tp)
    micro_batches: int = 2  # coupled: 2 = two-micro-batch overlap, 1 = none
    attn_dp: int = 4  # disaggregated: attention DP groups (D)
    attn_tp: int = 4  # disaggregated: TP members per attention group (T)
    expert_devices: int = 16  # disaggregated: MoE devices (E)
    dual_batch: bool = True  # disaggregated: interleave two batches per group layer by layer
    step_tokens: int = 262144  # tokens admitted per prefill step across the deployment
    devices_per_node: int = 8  # ranks sharing one host (and one host clock)
    ascend_comm: str = (
        "fused"  # Ascend writer: fused MoeDistribute* ops (the HCCL step all-gather is always there)
    )

    @property
    def world_size(self) -> int:
        if self.mode == "coupled":
            return self.dp * self.tp
        return self.attn_dp * self.attn_tp + self.expert_devices


@dataclass(frozen=True)
class CostConfig:
    """The ``[costs]`` table (ms, tokens in thousands); DOMAIN.md §3 defaults.

    The attention, MoE and transfer keys are the replay's :class:`~asaptrace.replay.costs.CostModel`
    under synth's names (:func:`asaptrace.synth.costs.cost_model` maps them); the others shape the
    kernels a trace shows beyond the cost model's items, and add noise.
    """

    attn_c0: float = 0.05  # fixed per attention kernel
    attn_c1: float = 1.41  # per 1K new tokens (Σ s)
    attn_c2: float = 0.0215  # per (1K tokens)² (Σ s², cached prefix excluded: s² − c²)
    attn_per_request: float = 0.01
    gate_c0: float = 0.02
    gate_c1: float = 0.004
    layout: float = 0.012  # get_dispatch_layout
    notify: float = 0.015  # notify_dispatch
    shared_c0: float = 0.04  # shared expert GEMM
    shared_c1: float = 0.05
    dense_c0: float = 0.1  # dense MLP GEMM (first layers)
    dense_c1: float = 0.45
    moe_floor: float = 0.55  # memory-bound plateau of the grouped GEMM
    moe_c0: float = 0.23
    moe_c1: float = 0.572  # per 1K (token, expert) assignments on the device (0.286/1K tokens at E=16, top-8)
    dispatch_c0: float = 0.19  # transfer of t tokens per sender: c0 + c1·t/1K (dispatch and combine)
    dispatch_c1: float = 0.71
    combine_payload: float = 1.0 / 0.71  # combine moves this × dispatch's bytes per token (bf16 vs fp8)
    recv_c0: float = 0.01  # disaggregated: copy out of the receive buffer
    recv_c1: float = 0.02
    allgather: float = 0.03  # per-step DP metadata all-gather
    launch_us: float = 6.0  # host cost of one kernel launch
    launch_latency_us: float = 4.0  # launch → earliest kernel start
    jitter: float = 0.03  # lognormal sigma of every kernel's duration
    step_gap_ms: float = 1.5  # scheduler work between prefill steps
    net_latency_us: float = 8.0  # disaggregated: one-way latency of a send
    contention: float = 0.0  # disaggregated: a send × (1 + contention × sends in flight); synth.contention


@dataclass(frozen=True)
class StragglerConfig:
    """Optional persistent stragglers."""

    slow_rank: int = -1  # a persistently slow device (-1: none)
    slow_factor: float = 1.0  # its compute kernels take this much longer
    hot_expert: int = -1  # an expert that receives hot_factor × its fair share (-1: none)
    hot_factor: float = 1.0
    routing_skew: float = 0.15  # coefficient of variation of per-layer expert popularity


@dataclass(frozen=True)
class ClockConfig:
    """Per-rank clock offsets (added to every timestamp a rank writes)."""

    offset_max_us: float = 3000.0  # offsets drawn uniformly in ±offset_max_us
    per: str = "node"  # node: ranks of one host share a clock; rank: every rank its own
    epoch_ns: int = 1_750_000_000_000_000_000  # true time 0 of the run, as a wall-clock


@dataclass(frozen=True)
class RunConfig:
    steps: int = 2
    seed: int = 0
    noise_seed: int = -1  # ≥ 0: the execution model's draws (kernel noise, routing) from this seed instead
    format: str = "kineto"  # kineto | ascend | both


@dataclass(frozen=True)
class SynthConfig:
    preset: str = ""
    description: str = ""
    model: ModelConfig = field(default_factory=ModelConfig)
    deployment: DeploymentConfig = field(default_factory=DeploymentConfig)
    costs: CostConfig = field(default_factory=CostConfig)
    straggler: StragglerConfig = field(default_factory=StragglerConfig)
    clock: ClockConfig = field(default_factory=ClockConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for table, key in _OMITTED_AT_DEFAULT:
            if out[table][key] == getattr(type(getattr(self, table))(), key):
                del out[table][key]
        return out


FORMATS = ("kineto", "ascend", "both")


def list_presets() -> dict[str, str]:
    """Built-in preset names → one-line descriptions."""
    out = {}
    for entry in sorted(
        resources.files("asaptrace.synth").joinpath("presets").iterdir(), key=lambda p: p.name[:-5]
    ):
        if entry.name.endswith(".toml"):
            doc = tomllib.loads(entry.read_text())
            out[entry.name.removesuffix(".toml")] = str(doc.get("description", ""))
    return out


def load_config(
    preset: str | None = None,
    config_file: str | Path | None = None,
    *,
    seed: int | None = None,
    steps: int | None = None,
    fmt: str | None = None,
) -> SynthConfig:
    """Defaults ← preset ← TOML file ← explicit options; validated."""
    cfg = SynthConfig()
    if preset:
        presets = list_presets()
        if preset not in presets:
            raise UsageError(f"unknown preset {preset!r} (known: {', '.join(presets)})")
        text = resources.files("asaptrace.synth").joinpath(f"presets/{preset}.toml").read_text()
        cfg = _overlay(cfg, _parse(text, f"preset {preset}"), f"preset {preset}")
        cfg = replace(cfg, preset=preset)
    if config_file is not None:
        path = Path(config_file)
        text = read_text(path, "configuration file")
        cfg = _overlay(cfg, _parse(text, str(path)), str(path))
    run = cfg.run
    if seed is not None:
        run = replace(run, seed=seed)
    if steps is not None:
        run = replace(run, steps=steps)
    if fmt is not None:
        run = replace(run, format=fmt)
    cfg = replace(cfg, run=run)
    validate(cfg)
    return cfg


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"invalid TOML ({err})", path=where) from None


#: settings that were renamed or folded into another, and what to write instead
RENAMED: dict[str, str] = {
    "costs.combine_c0": "dispatch and combine share the transfer latency 'costs.dispatch_c0'",
    "costs.combine_c1": "use 'costs.combine_payload' = combine_c1 / dispatch_c1 (default 1.0 / 0.71)",
}


def _overlay(obj: Any, doc: dict[str, Any], where: str, section: str = "") -> Any:
    known = {f.name: f for f in fields(obj)}
    changes: dict[str, Any] = {}
    for key, value in doc.items():
        name = f"{section}.{key}" if section else key
        if name in RENAMED:
            raise UsageError(f"setting {name!r} is gone: {RENAMED[name]}", path=where)
        if key not in known:
            raise UsageError(f"unknown setting {name!r} (known: {', '.join(known)})", path=where)
        current = getattr(obj, key)
        if is_dataclass(current):
            if not isinstance(value, dict):
                raise UsageError(f"{name!r} must be a table", path=where)
            changes[key] = _overlay(current, value, where, name)
        else:
            changes[key] = _coerce(current, value, name, where)
    return replace(obj, **changes)


def _coerce(current: Any, value: Any, name: str, where: str) -> Any:
    if isinstance(current, bool):
        ok = isinstance(value, bool)
    elif isinstance(current, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(current, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, type(current))
    if not ok:
        raise UsageError(f"{name!r} must be {type(current).__name__}, not {value!r}", path=where)
    return value


def validate(cfg: SynthConfig) -> None:
    """Refuse settings the generator cannot run, with the setting named."""
    d, m, r = cfg.deployment, cfg.model, cfg.run
    problems = []
    if d.mode not in ("coupled", "disaggregated"):
        problems.append(f"deployment.mode must be coupled or disaggregated, not {d.mode!r}")
    if r.format not in FORMATS:
        problems.append(f"run.format must be one of {', '.join(FORMATS)}, not {r.format!r}")
    if r.steps < 1:
        problems.append("run.steps must be at least 1")
    if min(d.dp, d.tp, d.attn_dp, d.attn_tp, d.expert_devices, d.devices_per_node) < 1:
        problems.append("deployment sizes must be at least 1")
    if d.micro_batches not in (1, 2):
        problems.append("deployment.micro_batches must be 1 or 2")
    if not 0 <= m.dense_layers <= m.layers or m.layers < 1:
        problems.append("model.dense_layers must be within 0..layers")
    ep = d.dp * d.tp if d.mode == "coupled" else d.expert_devices
    if m.experts % ep:
        problems.append(f"model.experts ({m.experts}) must divide evenly over {ep} expert-parallel devices")
    if not 1 <= m.top_k <= m.experts:
        problems.append("model.top_k must be within 1..experts")
    s = cfg.straggler
    if s.slow_rank >= d.world_size:
        problems.append(
            f"straggler.slow_rank {s.slow_rank} is not a rank of a {d.world_size}-device deployment"
        )
    if s.hot_expert >= m.experts:
        problems.append(f"straggler.hot_expert {s.hot_expert} is not an expert (0..{m.experts - 1})")
    if s.slow_factor <= 0 or s.hot_factor <= 0:
        problems.append("straggler factors must be positive")
    if cfg.clock.per not in ("node", "rank"):
        problems.append("clock.per must be node or rank")
    if d.ascend_comm not in ("fused",):
        problems.append("deployment.ascend_comm must be fused")
    if cfg.costs.combine_payload <= 0:
        problems.append("costs.combine_payload must be positive")
    if cfg.costs.contention < 0:
        problems.append("costs.contention must be at least 0")
    if d.step_tokens < 1:
        problems.append("deployment.step_tokens must be positive")
    if problems:
        raise UsageError("; ".join(problems))


def config_toml(cfg: SynthConfig) -> str:
    """The resolved configuration as TOML (written next to the traces, for the record)."""
    lines = [f"preset = {_toml_value(cfg.preset)}", f"description = {_toml_value(cfg.description)}"]
    for f in fields(cfg):
        value = getattr(cfg, f.name)
        if not is_dataclass(value):
            continue
        lines.append(f"\n[{f.name}]")
        for g in fields(value):
            if (f.name, g.name) in _OMITTED_AT_DEFAULT and getattr(value, g.name) == g.default:
                continue
            lines.append(f"{g.name} = {_toml_value(getattr(value, g.name))}")
    return "\n".join(lines) + "\n"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
