"""asap's and afd-pingpong's built-in online formers compiled into the pipeline kernel
(``_pkernel.run_formed``) against the Python formers they replace: on the same request streams and
deployments every request's start, end and own time, the batch count and the event count are the
same, to the bit. A subclass that overrides a hook keeps the Python former (and its own answer)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from asaptrace.replay.mechanics import pipeline_run
from asaptrace.replay.policies import policy_of
from asaptrace.replay.policies.afd_pingpong import AfdPingpong, PingpongFormer
from asaptrace.replay.policies.asap import Asap, AsapFormer
from asaptrace.replay.policies.pipelined_online import serve_on_pipeline
from asaptrace.replay.serving.scenario import load_scenario
from asaptrace.replay.whatif.simulate import ServingRequests

pytestmark = pytest.mark.skipif(
    not pipeline_run.kernel_available(), reason="the pipeline kernel was not built"
)

MS = 1_000_000
SC = load_scenario("asap-paper")


class PythonAsapFormer(AsapFormer):
    """asap's former with every hook its own, kept in Python: the reference."""

    def compiled_rule(self):
        return None


class PythonPingpongFormer(PingpongFormer):
    def compiled_rule(self):
        return None


class ShortestFirstFormer(AsapFormer):
    def order(self, queue):
        return sorted(queue, key=lambda i: (self.new[i], i))


def stream(seed: int, n: int, *, bursty: bool, gap_ms: float) -> ServingRequests:
    """n requests: prompts drawn from a few lengths (so that batches recur, as a resampled store's
    do) and a few random ones, some with a cached prefix; Poisson arrivals, or bursts of up to 30
    arriving at the same nanosecond (queues build behind a busy pipeline)."""
    rng = np.random.default_rng(seed)
    new = rng.choice([300, 700, 1024, 2048, 3000, 6000, 12000, 20000, 40000], n)
    new = np.where(rng.random(n) < 0.2, rng.integers(1, 30000, n), new)
    cached = np.where(rng.random(n) < 0.3, rng.choice([512, 4096], n), 0)
    if bursty:
        at = np.repeat(np.cumsum(rng.exponential(gap_ms * 15, n)), rng.integers(1, 30, n))[:n]
    else:
        at = np.cumsum(rng.exponential(gap_ms, n))
    return ServingRequests(
        (at * MS).astype(np.int64), (new + cached).astype(np.int64), cached.astype(np.int64)
    )


def serve_both(pol: Asap | AfdPingpong, req: ServingRequests):
    """The same serving run with the compiled former and with the Python former, both on the kernel."""
    built_in, python = (
        (AsapFormer, PythonAsapFormer) if isinstance(pol, Asap) else (PingpongFormer, PythonPingpongFormer)
    )
    compiled = built_in(req, SC, pol)
    assert compiled.compiled_rule() is not None
    got = serve_on_pipeline(req, SC, pol.online_config(SC), compiled, pol.name)
    assert compiled.members == []  # (the Python former fills members: the compiled one ran)
    reference = python(req, SC, pol)
    want = serve_on_pipeline(req, SC, pol.online_config(SC), reference, pol.name)
    assert len(reference.members) == want.steps
    return got, want


def assert_same(got, want) -> None:
    for field in ("start_ns", "end_ns", "own_ns"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), field
    assert (got.steps, got.layer_items, got.events) == (want.steps, want.layer_items, want.events)


CASES = [
    # (attention, experts, settings, stream: seed, n, bursty, mean gap ms)
    ("4x4", 16, {}, (1, 400, False, 20.0)),
    ("4x4", 16, {}, (2, 400, True, 20.0)),
    ("1x4", 8, {"long_tokens": 2000}, (3, 300, True, 10.0)),  # the reservation path, one group
    ("2x4", 8, {"long_tokens": 5000}, (4, 300, True, 10.0)),
    (
        "3x2",
        6,
        {"long_tokens": 5000, "min_batch_tokens": 6000, "max_batch_tokens": 9000},
        (5, 300, True, 5.0),
    ),
    ("4x4", 16, {"dual_batch": False}, (6, 400, True, 10.0)),
    (
        "2x4",
        8,
        {"dual_batch": False, "min_batch_tokens": 4096, "max_batch_tokens": 8192},
        (7, 300, True, 8.0),
    ),
    ("4x4", 16, {"overlap": False, "super_kernel": False}, (8, 300, True, 10.0)),
    ("2x4", 8, {"expert_failure": True, "long_tokens": 3000}, (9, 300, True, 10.0)),
    ("4x2", 12, {"min_batch_tokens": 1, "max_batch_tokens": 1}, (10, 200, True, 10.0)),  # one request a batch
    ("1x4", 4, {"min_batch_tokens": 100000, "max_batch_tokens": 100000}, (11, 300, True, 10.0)),
]


PINGPONG = [
    # (attention, experts, settings, stream: seed, n, bursty, mean gap ms)
    ("4x4", 16, {}, (21, 300, True, 20.0)),
    ("2x4", 8, {"m": 1}, (22, 200, True, 20.0)),
    ("4x4", 16, {"m": 3, "step_tokens": 20000}, (23, 300, True, 10.0)),  # steps the cap binds
    ("3x2", 6, {"m": 4, "step_tokens": 65536}, (24, 300, True, 5.0)),
    ("1x4", 8, {"m": 6, "expert_failure": True}, (25, 200, True, 10.0)),
    ("2x4", 8, {"m": 2, "step_tokens": 1}, (26, 150, False, 10.0)),  # one request a step
]


@pytest.mark.parametrize(
    ("policy", "attention", "experts", "settings", "drawn"),
    [(Asap, *case) for case in CASES] + [(AfdPingpong, *case) for case in PINGPONG],
)
def test_the_compiled_former_serves_exactly_as_the_python_former(policy, attention, experts, settings, drawn):
    pol = replace(policy(), attention=attention, experts=experts, **settings)
    req = stream(drawn[0], drawn[1], bursty=drawn[2], gap_ms=drawn[3])
    got, want = serve_both(pol, req)
    assert_same(got, want)
    assert (got.start_ns >= req.arrival_ns).all() and (got.end_ns > got.start_ns).all()


def test_the_cases_queue_and_take_the_reservation_path():
    # what the cases above are for: queues that hold many requests, and long batches cut for a
    # busy group (they start only after the request cut after them when the group was reserved)
    pol = replace(Asap(), attention="2x4", experts=8, long_tokens=5000)
    req = stream(4, 300, bursty=True, gap_ms=10.0)
    res, _ = serve_both(pol, req)
    waited = res.start_ns - req.arrival_ns
    assert (waited > 0).sum() > 100
    assert res.steps < len(req) * 0.9  # batches of several requests
    assert (np.diff(res.start_ns) < 0).any()  # a reserved batch handed out after a later one


def test_the_python_engine_agrees_with_the_compiled_former(monkeypatch):
    # ASAPTRACE_PIPELINE_ENGINE=python: the Python pipeline and the Python former, the reference
    pol = replace(Asap(), attention="2x4", experts=8, long_tokens=4000)
    req = stream(12, 150, bursty=True, gap_ms=10.0)
    got = pol.serve(req, SC)
    monkeypatch.setenv(pipeline_run.ENGINE_ENV, "python")
    former = AsapFormer(req, SC, pol)
    want = serve_on_pipeline(req, SC, pol.online_config(SC), former, pol.name)
    assert len(former.members) == want.steps  # the Python former ran
    assert_same(got, want)


def test_an_empty_stream_and_a_single_request():
    pol = Asap()
    empty = ServingRequests(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    got, want = serve_both(pol, empty)
    assert_same(got, want)
    assert got.steps == 0 and got.events == 0
    one = ServingRequests(np.array([5 * MS], np.int64), np.array([3000], np.int64), np.zeros(1, np.int64))
    got, want = serve_both(pol, one)
    assert_same(got, want)
    assert got.steps == 1 and got.start_ns.tolist() == [5 * MS]


def test_a_subclass_that_reorders_keeps_the_python_former():
    # One group, one slot (no dual batch), one batch per request (max 1 token: the first always
    # joins). Five prompts arrive together behind a busy group: FIFO serves them in arrival order,
    # shortest-first the shortest first.
    pol = replace(
        Asap(), attention="1x4", experts=4, dual_batch=False, min_batch_tokens=1, max_batch_tokens=1
    )
    new = np.array([8000, 9000, 1000, 4000, 2000], np.int64)
    req = ServingRequests(np.array([0, 1, 1, 1, 1], np.int64) * MS, new, np.zeros(5, np.int64))
    shortest = ShortestFirstFormer(req, SC, pol)
    assert shortest.compiled_rule() is None
    got = serve_on_pipeline(req, SC, pol.online_config(SC), shortest, pol.name)
    assert len(shortest.members) == got.steps == 5  # the Python former ran
    assert np.argsort(got.start_ns).tolist() == [0, 2, 4, 3, 1]
    fifo, _ = serve_both(pol, req)
    assert np.argsort(fifo.start_ns).tolist() == [0, 1, 2, 3, 4]
    assert not np.array_equal(fifo.end_ns, got.end_ns)


def test_an_instance_with_a_replaced_hook_keeps_the_python_former():
    former = AsapFormer(stream(1, 10, bursty=False, gap_ms=1.0), SC, Asap())
    former.admit = lambda request, batch, tokens: False
    assert former.compiled_rule() is None


def test_the_registry_asap_runs_compiled():
    # what the sweep and advise --online serve: the registry's asap and its ablations
    for spec in ("asap", "asap-no-dual-batch", "asap-expert-failure", "afd-pingpong", "afd-pingpong-m4"):
        pol = policy_of(spec)
        req = stream(13, 50, bursty=True, gap_ms=10.0)
        assert pol.online_former(req, SC, pol).compiled_rule() is not None


def test_pingpong_steps_split_longest_first_over_m_micro_batches():
    # one step of six prompts queued together behind a busy stage, m = 3: longest-first onto the
    # least-loaded micro-batch → {9000}, {8000}, {4000, 2000, 1000, 700}
    pol = replace(AfdPingpong(), attention="1x4", experts=4, m=3)
    new = np.array([3000, 4000, 9000, 1000, 8000, 2000, 700], np.int64)
    req = ServingRequests(np.array([0, 1, 1, 1, 1, 1, 1], np.int64) * MS, new, np.zeros(7, np.int64))
    got, want = serve_both(pol, req)
    assert_same(got, want)
    assert got.steps == 1 + 3
    ends = got.end_ns[1:].tolist()  # requests 1–6: 4000, 9000, 1000, 8000, 2000, 700
    assert ends[0] == ends[2] == ends[4] == ends[5]
    assert len({ends[0], ends[1], ends[3]}) == 3
    assert len({*got.start_ns[1:].tolist()}) == 1  # the step's micro-batches are handed out together


def test_a_pingpong_subclass_that_reorders_keeps_the_python_former():
    class Shortest(PingpongFormer):
        def order(self, queue):
            return sorted(queue, key=lambda i: (self.new[i], i))

    pol = replace(AfdPingpong(), attention="1x4", experts=4, m=1, step_tokens=1)
    new = np.array([8000, 9000, 1000, 4000, 2000], np.int64)
    req = ServingRequests(np.array([0, 1, 1, 1, 1], np.int64) * MS, new, np.zeros(5, np.int64))
    former = Shortest(req, SC, pol)
    assert former.compiled_rule() is None
    got = serve_on_pipeline(req, SC, pol.online_config(SC), former, pol.name)
    assert np.argsort(got.start_ns).tolist() == [0, 2, 4, 3, 1]
    fifo, _ = serve_both(pol, req)
    assert np.argsort(fifo.start_ns).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("overlap", "launch"), [(True, 0), (False, 220_000)])
def test_the_kernel_totals_are_the_python_totals_and_other_arrays_fall_back(overlap, launch):
    # own shares read each distinct cost set's attention and rest totals: the kernel sums its int64
    # copies; a cost_of answering other arrays (floats here) is summed by _totals itself
    from asaptrace.replay.mechanics.pipelined import PipelineConfig
    from asaptrace.replay.policies.pipelined_online import _formed_totals, _totals

    rng = np.random.default_rng(3)

    def cost_of(pieces):
        tokens = sum(p[0] for p in pieces)
        arrays = [rng.integers(0, 10**7, 5) * (tokens % 3 > 0) for _ in range(4)]
        return tuple(a.astype(np.float64) if tokens % 2 else a for a in arrays)

    req = stream(31, 200, bursty=True, gap_ms=5.0)
    rule = pipeline_run.TokenRule(req.arrival_ns, req.new_tokens, req.cached_len, 2048, 32768, 16384, cost_of)
    cfg = PipelineConfig(groups=2, slots=2, overlap=overlap, comm_share=0.37, launch_ns=launch)
    formed = pipeline_run.run_formed(cfg, rule)
    assert formed.exact.any() and not formed.exact.all()
    got, want = _formed_totals(formed, cfg), _totals(formed.costs, cfg)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_a_kernel_built_before_the_compiled_formers_runs_the_python_former(monkeypatch):
    from types import SimpleNamespace

    pol = replace(Asap(), attention="2x4", experts=8)
    req = stream(14, 100, bursty=True, gap_ms=10.0)
    want = pol.serve(req, SC)
    monkeypatch.setattr(pipeline_run, "_pkernel", SimpleNamespace(run=pipeline_run._pkernel.run))
    former = AsapFormer(req, SC, pol)
    got = serve_on_pipeline(req, SC, pol.online_config(SC), former, pol.name)
    assert len(former.members) == got.steps  # the Python former ran, on the kernel's loop
    assert_same(got, want)
