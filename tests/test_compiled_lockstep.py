"""The lockstep family's online loop compiled (``_lkernel.run_lockstep``, driven by
:func:`asaptrace.replay.mechanics.lockstep_run.run_compiled`) against the Python loop it replaces
(``ASAPTRACE_PIPELINE_ENGINE=python``): coupled's, balanced's and chunked's built-in formers on the
same streams and deployments give every request the same start, end and own time, and the same
step count, to the bit. A hand-worked step shows the placement itself; a former whose hooks were
replaced, or routing on arrival, keeps the Python loop."""

from __future__ import annotations

import numpy as np
import pytest

from asaptrace.replay.mechanics import lockstep_run
from asaptrace.replay.mechanics.lockstep_run import CHUNKS, TOKENS, WEIGHTS, kernel_mode
from asaptrace.replay.policies import policy_of
from asaptrace.replay.policies.balanced import BalancedFormer
from asaptrace.replay.policies.chunked import ChunkedFormer
from asaptrace.replay.policies.lockstep_online import LockstepFormer, serve_lockstep
from asaptrace.replay.serving.scenario import load_scenario
from tests.test_compiled_former import stream

pytestmark = pytest.mark.skipif(lockstep_run._lkernel is None, reason="the lockstep kernel was not built")

SC = load_scenario("asap-paper")


def serve_both(pol, req, monkeypatch):
    """The same serving run on the kernel and on the Python loop (the reference)."""
    got = pol.serve(req, SC)
    with monkeypatch.context() as m:
        m.setenv("ASAPTRACE_PIPELINE_ENGINE", "python")
        want = pol.serve(req, SC)
    return got, want


def assert_same(got, want) -> None:
    for field in ("start_ns", "end_ns", "own_ns"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field
    assert got.steps == want.steps


CASES = [
    # (policy, settings): small and large groups, step and group budgets that bind, chunk sizes
    ("coupled", {"attention": "4x2"}),
    ("coupled", {"attention": "8x1", "step_tokens": 20000, "group_tokens": 6000}),
    ("coupled", {"attention": "3x4", "micro_batch_overlap": True}),
    ("coupled", {"attention": "5x2", "k_s": 1.37}),  # a collective factor: k_s·X rounds
    ("balanced", {"attention": "4x2"}),
    ("balanced", {"attention": "6x2", "step_tokens": 30000, "group_tokens": 9000}),
    ("chunked", {"attention": "4x2", "chunk_tokens": 4096}),
    ("chunked", {"attention": "7x1", "chunk_tokens": 1000}),
    ("chunked", {"attention": "2x4", "chunk_tokens": 16384}),
    ("chunked", {"attention": "3x2", "chunk_tokens": 3000, "k_s": 1.61}),
]


@pytest.mark.parametrize(("name", "settings"), CASES)
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("bursty", [False, True])
def test_the_kernel_serves_as_the_python_loop(name, settings, seed, bursty, monkeypatch):
    pol = policy_of(name, settings)
    req = stream(seed, 400, bursty=bursty, gap_ms=40.0)
    got, want = serve_both(pol, req, monkeypatch)
    assert_same(got, want)
    assert (got.end_ns >= 0).all()  # every request was served (the loop drains)


def test_a_step_is_placed_longest_first_onto_the_least_loaded_group():
    """Hand-worked: requests of 100, 300, 200 and 50 new tokens, all at t = 0, two groups, group
    budget 350. Longest first: 300 → g0; 200 → g1 (load 0 < 300); 100 → g1 (200 < 300); 50 → g0
    (300 = 300: the lower index; 350 ≤ 350 fits). The step costs 1,000 ns and every piece's share
    is 1.0 (the cost callable's): one step serves all four."""
    seen = []

    def cost(groups):
        seen.append([[tuple(p) for p in g] for g in groups])
        return 1000, [1.0] * sum(len(g) for g in groups)

    arrival = np.zeros(4, np.int64)
    new = np.array([100, 300, 200, 50], np.int64)
    start, end, own, steps = lockstep_run._lkernel.run_lockstep(
        arrival.tobytes(),
        new.tobytes(),
        np.zeros(4, np.int64).tobytes(),
        2,
        10_000,
        350,
        TOKENS,
        0,
        0.0,
        0.0,
        cost,
        None,  # each step's cost asked of cost(groups)
    )
    assert seen == [[[(1, 300, 0), (3, 50, 0)], [(2, 200, 0), (0, 100, 0)]]]
    assert steps == 1
    assert np.frombuffer(start, np.int64).tolist() == [0, 0, 0, 0]
    assert np.frombuffer(end, np.int64).tolist() == [1000] * 4
    assert np.frombuffer(own, np.float64).tolist() == [1.0] * 4


def test_a_piece_that_does_not_fit_waits_for_the_next_step_in_arrival_order():
    """One group of budget 250, requests of 150, 200 and 100 at t = 0: the 200 goes first (longest);
    the 150 and the 100 do not fit behind it and go back to the queue's front in arrival order; the
    next step (at 10 ns) holds both (150 + 100 = 250 ≤ 250)."""
    seen = []

    def cost(groups):
        seen.append([[p[0] for p in g] for g in groups])
        return 10, [0.0] * sum(len(g) for g in groups)

    new = np.array([150, 200, 100], np.int64)
    _, end, _, steps = lockstep_run._lkernel.run_lockstep(
        np.zeros(3, np.int64).tobytes(),
        new.tobytes(),
        np.zeros(3, np.int64).tobytes(),
        1,
        10_000,
        250,
        TOKENS,
        0,
        0.0,
        0.0,
        cost,
        None,  # each step's cost asked of cost(groups)
    )
    assert seen == [[[1]], [[0, 2]]]
    assert steps == 2 and np.frombuffer(end, np.int64).tolist() == [20, 10, 20]


def test_the_built_in_formers_name_their_kernel_mode_and_a_replaced_hook_keeps_python(monkeypatch):
    req = stream(3, 200, bursty=True, gap_ms=40.0)
    coupled, balanced, chunked = (policy_of(n) for n in ("coupled", "balanced", "chunked"))
    assert kernel_mode(LockstepFormer(req, SC, coupled)) == TOKENS
    assert kernel_mode(BalancedFormer(req, SC, balanced)) == WEIGHTS
    assert kernel_mode(ChunkedFormer(req, SC, chunked)) == CHUNKS

    class ShortestFirst(LockstepFormer):
        def order(self, queue):
            return sorted(queue, key=lambda i: (self.remaining[i], i))

    former = ShortestFirst(req, SC, coupled)
    assert kernel_mode(former) is None
    got = serve_lockstep(req, SC, former, "shortest-first")
    with monkeypatch.context() as m:
        m.setenv("ASAPTRACE_PIPELINE_ENGINE", "python")
        want = serve_lockstep(req, SC, ShortestFirst(req, SC, coupled), "shortest-first")
    assert_same(got, want)
    fifo = coupled.serve(req, SC)
    assert not np.array_equal(got.start_ns, fifo.start_ns)  # its own order, not the kernel's FIFO


def test_routing_on_arrival_runs_the_python_loop(monkeypatch):
    calls = []
    monkeypatch.setattr(lockstep_run._lkernel, "run_lockstep", lambda *a: calls.append(a))
    req = stream(4, 100, bursty=False, gap_ms=40.0)
    policy_of("coupled", {"routing": "arrival"}).serve(req, SC)
    assert calls == []
