"""``truth.json``: what the generator knows about a synthetic run, for tests only.

Analyses never read it; tests compare it with what an analysis recovers from the written events.
Times are on the run's *true* clock (ns from time 0). A rank writes every timestamp as
``epoch_ns + t + clock_offset_ns[rank]``, so ``t = written − epoch_ns − clock_offset_ns[rank]``.
Large tables are columnar (one list per column) to keep the file small.

Keys: ``format_version``, ``time_base``, ``epoch_ns``, ``config`` (the resolved configuration),
``ranks`` (rank, role, dp_group, tp_index, ep_index, node, device, clock_offset_ns),
``clock_offsets_ns``, ``straggler`` (slow device, hot expert and the rank holding it), ``batches``
(step, dp_group, micro_batch, request_id, seq_len, cached_len, arrival_ns, ttft_ns: the end of
the last device kernel of the request's step on its DP group's ranks − its arrival), ``steps`` (per step:
start/end and per-group tokens, Σs², modelled attention time, imbalance), ``waits`` (per rank and
collective instance: step, layer, micro_batch, op, rank, arrival_ns, release_ns, wait_ns; a dispatch
instance opens with DeepEP's notify_dispatch, so its arrival is that kernel's start; layer -1 is the
step's all-gather; in the disaggregated run op ``combine_recv`` is the time a group spins for
its own results), and ``expert_loads`` (coupled) or ``expert_items`` and ``attention_stalls``
(disaggregated: compute idle of an attention device before a layer because its results were late).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from asaptrace.replay.mechanics.planner import StepPlan
from asaptrace.synth.config import SynthConfig
from asaptrace.synth.timeline import Annotation, RankMeta
from asaptrace.workload.requests import Requests

TRUTH_VERSION = 1


def assemble(
    cfg: SynthConfig,
    ranks: list[RankMeta],
    offsets: np.ndarray,
    reqs: Requests,
    plans: list[StepPlan],
    parts: dict[str, Any],
    annotations: list[Annotation] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    d, s = cfg.deployment, cfg.straggler
    batches: dict[str, list] = {
        k: []
        for k in (
            "step",
            "dp_group",
            "micro_batch",
            "request_id",
            "seq_len",
            "cached_len",
            "arrival_ns",
            "ttft_ns",
        )
    }
    ends = _group_step_ends(annotations)
    for plan in plans:
        for (g, mb), idx in sorted(plan.slots.items()):
            for i in idx.tolist():
                for k, v in (
                    ("step", plan.step),
                    ("dp_group", g),
                    ("micro_batch", mb),
                    ("request_id", reqs.ids[i]),
                    ("seq_len", int(reqs.seq_len[i])),
                    ("cached_len", int(reqs.cached_len[i])),
                    ("arrival_ns", int(reqs.arrival_ns[i])),
                    (
                        "ttft_ns",
                        ends[(plan.step, g)] - int(reqs.arrival_ns[i]) if (plan.step, g) in ends else None,
                    ),
                ):
                    batches[k].append(v)
    w = parts["waits"]
    waits = {k: _flat(v) for k, v in w.items()}
    waits["wait_ns"] = [r - a for a, r in zip(waits["arrival_ns"], waits["release_ns"], strict=True)]
    ep = d.dp * d.tp if d.mode == "coupled" else d.expert_devices
    hot_rank = None
    if s.hot_expert >= 0:
        dev = s.hot_expert // (cfg.model.experts // ep)
        hot_rank = dev if d.mode == "coupled" else d.attn_dp * d.attn_tp + dev
    truth = {
        "format_version": TRUTH_VERSION,
        "time_base": "true clock, ns from the run's time 0; written timestamp = epoch_ns + t + clock_offset_ns[rank]",
        "epoch_ns": cfg.clock.epoch_ns,
        "config": cfg.to_dict(),
        "ranks": [
            {
                "rank": r.rank,
                "role": r.role,
                "dp_group": r.dp_group,
                "tp_index": r.tp_index,
                "ep_index": r.ep_index,
                "node": r.node,
                "device": r.device,
                "clock_offset_ns": int(offsets[r.rank]),
            }
            for r in ranks
        ],
        "clock_offsets_ns": [int(v) for v in offsets],
        "straggler": {
            "slow_rank": s.slow_rank if s.slow_rank >= 0 else None,
            "slow_factor": s.slow_factor,
            "hot_expert": s.hot_expert if s.hot_expert >= 0 else None,
            "hot_expert_rank": hot_rank,
            "hot_factor": s.hot_factor,
        },
        "batches": batches,
        "steps": parts["steps"],
        "waits": waits,
    }
    for key in ("expert_loads", "expert_items", "attention_stalls"):
        if key in parts:
            truth[key] = parts[key]
    return truth


def _group_step_ends(annotations: list[Annotation]) -> dict[tuple[int, int], int]:
    """(step, dp_group) → end of the last device kernel of the step on the group's ranks (true
    clock): when the step's first tokens exist."""
    ends: dict[tuple[int, int], int] = {}
    for a in annotations:
        if a.name.startswith("prefill_step#") and "dp_group" in a.args:
            key = (int(a.args["step"]), int(a.args["dp_group"]))
            ends[key] = max(ends.get(key, a.dev_end), a.dev_end)
    return ends


def _flat(chunks: list) -> list:
    out: list = []
    for c in chunks:
        out.extend(c.tolist() if isinstance(c, np.ndarray) else list(c))
    return [int(v) if isinstance(v, np.integer) else v for v in out]


def write_truth(truth: dict[str, Any], path: Path) -> None:
    path.write_text(json.dumps(truth, separators=(",", ":"), sort_keys=False) + "\n")
