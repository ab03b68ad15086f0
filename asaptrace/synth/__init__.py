"""Synthetic MoE prefill traces with a known ground truth (``asaptrace synth``).

workload (requests: arrivals, lengths from real distributions) → schedule (token-balanced batches)
→ execution model (coupled or disaggregated; per-rank kernels on the true clock) → writers
(Kineto and/or Ascend files, clock offsets applied) + ``truth.json``.
"""

from asaptrace.synth.config import SynthConfig, load_config
from asaptrace.synth.config import list_presets as presets
from asaptrace.synth.run import SynthResult, build_timeline, synthesize

__all__ = ["SynthConfig", "SynthResult", "build_timeline", "load_config", "presets", "synthesize"]
