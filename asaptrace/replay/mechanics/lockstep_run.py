"""The lockstep family's online loop in the compiled kernel (``_lkernel``), when it can run it.

:func:`~asaptrace.replay.policies.lockstep_online.serve_lockstep` forms a few hundred steps a
serving run, and forming one in Python costs tens of microseconds: most of a coupled, balanced or
chunked run. The kernel runs the same loop with the built-in formers' hooks compiled (the FIFO
take, the stable heaviest-first order, the (load, group) minimum, the chunked cut) and each step's
cost from its groups' parts (the step coster's arithmetic; the parts, which the cost model's
registered parts compute, asked of the coster once per group a run; with micro-batch overlap the
whole step is asked of it). It runs
a former only when the former's class names its mode (``kernel_mode``) and no subclass or instance
replaced one of :data:`HOOKS`, its budgets are integers and its tokens integer;
``ASAPTRACE_PIPELINE_ENGINE=python`` keeps the Python loop (the reference: the kernel gives the
same start, end and own time to the bit, tests/test_compiled_lockstep.py).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from asaptrace.replay.mechanics.formers import integer_settings, runs_hooks_of
from asaptrace.replay.mechanics.pipeline_run import ENGINE_ENV  # "python" keeps both loops in Python

try:  # the kernel is optional: without it the Python loop runs
    from asaptrace.replay.mechanics import _lkernel  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - a build without a C compiler
    _lkernel = None

#: the compiled step formers: the lockstep former's (weight: remaining tokens), balanced's
#: (weight: its piece_weight), chunked's with a budget
TOKENS, WEIGHTS, CHUNKS = 0, 1, 2
#: the former's hooks the kernel runs in place of Python's: overriding any keeps the Python loop
HOOKS = ("order", "admit", "weight", "take", "form_step")


def kernel_mode(former: Any) -> int | None:
    """The kernel's step former for ``former`` (None: it runs in Python): its class's nearest
    ``kernel_mode``, when the former runs that class's very :data:`HOOKS`."""
    cls = next((c for c in type(former).__mro__ if "kernel_mode" in vars(c)), None)
    if cls is None or cls.kernel_mode is None:
        return None
    if not runs_hooks_of(former, cls, HOOKS):
        return None
    mode = int(cls.kernel_mode)
    return TOKENS if mode == CHUNKS and not former.chunk else mode  # no budget: whole prompts


def run_compiled(
    former: Any, base: type, arrival_ns: np.ndarray, coster: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """Serve on the kernel: each request's start and end (int64 ns, -1: never), its own time (float
    ns, before rounding) and the step count; None when the Python loop must run (module docstring).
    ``base`` is the lockstep former class (its budgets: ``former.st``); ``coster`` the policy's
    :class:`~asaptrace.replay.policies.lockstep_cost.StepCoster`: the kernel costs a step itself from
    its groups' kept parts (``group_parts``, ``moe_at``, ``xfer_at``: the coster's ``_cost``
    arithmetic), or, with micro-batch overlap, asks ``coster.cost(groups)``."""
    if _lkernel is None or os.environ.get(ENGINE_ENV) == "python" or not isinstance(former, base):
        return None
    mode = kernel_mode(former)
    st = former.st
    if mode is None or not integer_settings(st.step_tokens, st.group_tokens, former.chunk):
        return None
    remaining, done = np.asarray(former.remaining), np.asarray(former.done)
    if remaining.dtype.kind != "i" or done.dtype.kind != "i" or max(former.carry, default=-1) >= 0:
        return None  # float tokens (the Python loop's arithmetic), or a run already under way
    c1 = c2 = 0.0
    if mode == WEIGHTS:
        c1, c2 = float(former.costs.attn_c1_ms), float(former.costs.attn_c2_ms)
    start, end, own, steps = _lkernel.run_lockstep(
        np.ascontiguousarray(arrival_ns, np.int64).tobytes(),
        remaining.astype(np.int64).tobytes(),
        done.astype(np.int64).tobytes(),
        int(st.dp),
        int(st.step_tokens),
        int(st.group_tokens),
        mode,
        int(former.chunk),
        c1,
        c2,
        coster.cost,
        None
        if coster.st.overlap
        else (
            coster.group_parts,
            coster.moe_at,
            coster.xfer_at,
            float(coster.costs.coupled_k_s),
            int(coster.st.layers),
        ),
    )
    return (
        np.frombuffer(start, np.int64).copy(),
        np.frombuffer(end, np.int64).copy(),
        np.frombuffer(own, np.float64).copy(),
        steps,
    )
