"""Synthetic MoE prefill traces with a known ground truth (``asaptrace synth``).

workload (requests: arrivals, lengths from real distributions) → schedule (token-balanced batches)
→ execution model (coupled or disaggregated; per-rank kernels on the true clock) → writers
(Kineto and/or Ascend files, clock offsets applied) + ``truth.json``.

Modules, in that order: ``config`` (model, deployment, costs, straggler, clocks; ``presets/*.toml``),
``costs`` (the replay's cost model plus kernel shapes), ``coupled`` and ``disaggregated`` (the two
execution models; ``contention`` the disaggregated sends' link contention), ``timeline`` (the simulated run before any file format), ``kineto_writer`` and
``ascend_writer``, ``truth`` (``truth.json``), ``run`` (``synthesize``: config → files).
"""

from asaptrace.synth.config import SynthConfig, load_config
from asaptrace.synth.config import list_presets as presets
from asaptrace.synth.run import SynthResult, build_timeline, synthesize

__all__ = ["SynthConfig", "SynthResult", "build_timeline", "load_config", "presets", "synthesize"]
