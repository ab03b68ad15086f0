"""The compiled pipeline kernel against the Python engine, event for event.

The Python :class:`~asaptrace.replay.mechanics.pipelined.Pipeline` is the reference (its semantics are the
hand-worked cases of test_replay_mechanics.py); the kernel must give the *same trace*: every
attention, dispatch, MoE and combine span, every completion (in completion order), every group
and slot, and the number of events. Cases: the hand-worked ones again (their answers written
here too, so the kernel is held to the hand-derived numbers, not only to the reference), then
randomised runs over every mechanism (dual batch, alone reservation of long prompts, back-pressure,
no overlap with round-half-even ties, no super kernel, fixed service order), the offline formers
(StaticBatches, placed StaticBatches, FifoBatches), the online serving former for every ASAP
variant, and the offline asap replay of a sample store (with expert failure).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from asaptrace.errors import AccountingError, UsageError
from asaptrace.replay.costs import CostModel
from asaptrace.replay.mechanics import pipeline_run
from asaptrace.replay.mechanics.formers import Batch, FifoBatches, StaticBatches
from asaptrace.replay.mechanics.pipeline_run import run_pipeline
from asaptrace.replay.mechanics.pipelined import PipelineConfig, ServiceOrder

pytestmark = pytest.mark.skipif(
    not pipeline_run.kernel_available(), reason="the compiled pipeline kernel _pkernel is not built"
)


def _batch(i, attn, moe, xfer, alone=False, ready=0, combine=None) -> Batch:
    return Batch(
        batch_id=i,
        ready_ns=ready,
        attention_ns=np.array(attn, np.int64),
        dispatch_ns=np.array(xfer, np.int64),
        moe_ns=np.array(moe, np.int64),
        combine_ns=np.array(xfer if combine is None else combine, np.int64),
        alone=alone,
        key=(0, i, 0),
    )


def _trace_dict(tr) -> dict:
    """Everything a trace says, with the completion order (dict order) made explicit."""
    return {
        "attention": tr.attention,
        "dispatch": tr.dispatch,
        "moe": tr.moe,
        "combine": tr.combine,
        "done": list(tr.done.items()),
        "group_of": list(tr.group_of.items()),
        "slot_of": list(tr.slot_of.items()),
        "events": tr.events,
        "slots": tr.slots,
    }


def _run(cfg, former, order, engine):
    try:
        return run_pipeline(cfg, former, order=order, engine=engine), None
    except AccountingError as err:  # a fixed order with back-pressure can deadlock: both must say so
        return None, str(err)


def both(cfg, make_former, order=None, *, may_stall=False):
    """(reference, kernel) traces of one run, each with its own fresh former; asserts they agree."""
    ref, ref_err = _run(cfg, make_former(), order, "python")
    ker, ker_err = _run(cfg, make_former(), order, "c")
    assert ker_err == ref_err
    if ref_err is not None:
        assert may_stall, ref_err
        return None, None
    assert _trace_dict(ker) == _trace_dict(ref)
    return ref, ker


# ------------------------------------------------------------------------------ hand-worked cases
def test_two_groups_without_barrier_by_hand():
    # b1: attn 0–4, pool 5–7, back 8, attn 8–18, pool 19–21, back 22 (done);
    # b0: attn 0–10, pool 11–14, back 15, attn 15–19, pool 21–24 (after b1·l1), back 25 (done)
    b = [_batch(0, [10, 4], [3, 3], [1, 1]), _batch(1, [4, 10], [2, 2], [1, 1])]
    _, ker = both(PipelineConfig(groups=2, slots=1), lambda: StaticBatches(b, groups=2))
    assert ker.done == {1: 22, 0: 25} and list(ker.done) == [1, 0]
    assert sorted(ker.moe) == [(0, 0, 11, 14), (0, 1, 21, 24), (1, 0, 5, 7), (1, 1, 19, 21)]


def test_dual_batch_and_alone_by_hand():
    # two slots: b0 done 40, b1 done 50 (interleaved); one slot: b1 waits for b0 → 80
    b = [_batch(i, [10, 10], [10, 10], [0, 0]) for i in range(2)]
    _, two = both(PipelineConfig(groups=1, slots=2), lambda: StaticBatches(b, groups=1))
    _, one = both(PipelineConfig(groups=1, slots=1), lambda: StaticBatches(b, groups=1))
    assert two.done == {0: 40, 1: 50} and one.done == {0: 40, 1: 80}
    # b1 alone: waits for the group to drain (b0 done 40), runs 40–80 on both slots; b2 then 80–120
    b3 = [_batch(i, [10, 10], [10, 10], [0, 0], alone=(i == 1)) for i in range(3)]
    _, tr = both(PipelineConfig(groups=1, slots=2), lambda: StaticBatches(b3, groups=1))
    assert tr.done == {0: 40, 1: 80, 2: 120} and tr.slot_of == {0: 0, 1: 0, 2: 0}


def test_back_pressure_by_hand():
    # one buffer slot: b0's item holds it 1–11, b1's dispatch waits and is served 11–21
    b = [_batch(i, [1], [10], [0]) for i in range(2)]
    _, tr = both(PipelineConfig(groups=2, slots=1, buffer_slots=1), lambda: StaticBatches(b, groups=2))
    assert tr.done == {0: 11, 1: 21}


@pytest.mark.parametrize(
    ("share", "xfer", "pool"),
    [
        (0.25, 1, 10),  # 0.25·(1 + 1) = 0.5 → 0 (half to even)
        (0.25, 3, 12),  # 0.25·(3 + 3) = 1.5 → 2
        (0.25, 5, 12),  # 2.5 → 2
        (0.5, 2, 12),  # 2
        (0.3, 1, 11),  # 0.6 → 1
    ],
)
def test_no_overlap_rounds_half_to_even_like_python(share, xfer, pool):
    # one batch, one layer: attention 10, MoE 10 + round(share·(xfer + xfer)); pool item = pool
    b = [_batch(0, [10], [10], [xfer])]
    _, tr = both(PipelineConfig(groups=1, overlap=False, comm_share=share), lambda: StaticBatches(b))
    assert tr.moe == [(0, 0, 10 + xfer, 10 + xfer + pool)]
    assert tr.done[0] == 10 + xfer + pool + xfer


def test_super_kernel_off_adds_the_launch_per_pool_item_not_per_dense_layer():
    # layer 0 dense (no pool item), layer 1 MoE: attention 10 + 10, dispatch 2, MoE 10 + 5, combine 2
    b = [_batch(0, [10, 10], [0, 10], [0, 2])]
    _, tr = both(PipelineConfig(groups=1, launch_ns=5), lambda: StaticBatches(b))
    assert tr.done[0] == 10 + 10 + 2 + 15 + 2 and len(tr.moe) == 1


def test_an_online_former_is_called_exactly_as_the_reference_calls_it():
    # the former logs every call; both engines must ask the same questions in the same order
    class Logging:
        def __init__(self) -> None:
            self.calls: list[tuple[int, int, bool]] = []
            self.arrivals = {0: 0, 1: 3, 2: 3, 3: 7}
            self.taken: set[int] = set()

        def wakeups(self):
            return sorted(self.arrivals.values())

        def fresh(self):
            return Logging()

        def next_batch(self, now_ns, group, group_idle):
            self.calls.append((now_ns, group, group_idle))
            ready = [r for r, t in self.arrivals.items() if t <= now_ns and r not in self.taken]
            if not ready:
                return None
            self.taken.add(ready[0])
            return _batch(ready[0], [10, 3], [5, 5], [1, 1], ready=now_ns)

    formers = []

    def make():
        formers.append(Logging())
        return formers[-1]

    both(PipelineConfig(groups=2, slots=2), make)
    assert formers[0].calls == formers[1].calls and len(formers[0].calls) > 8


def test_a_former_saying_nothing_until_its_next_arrival_is_asked_nobody_before_it():
    # arrivals at 0, 3, 3 and 40: with nothing left the former answers its next arrival (an int),
    # and neither engine asks any group before it — same trace as answering None, fewer questions
    class Quiet:
        def __init__(self, quiet: bool | str) -> None:
            self.quiet, self.calls = quiet, []
            self.arrivals = {0: 0, 1: 3, 2: 3, 3: 40}
            self.taken: set[int] = set()

        def wakeups(self):
            return sorted(self.arrivals.values())

        def fresh(self):
            return Quiet(self.quiet)

        def next_batch(self, now_ns, group, group_idle):
            self.calls.append((now_ns, group, group_idle))
            ready = [r for r, t in self.arrivals.items() if t <= now_ns and r not in self.taken]
            if not ready:
                later = [t for r, t in self.arrivals.items() if r not in self.taken and t > now_ns]
                return min(later, default=1 << 62) if self.quiet else None
            self.taken.add(ready[0])
            b = _batch(ready[0], [10, 3], [5, 5], [1, 1], ready=now_ns)
            if self.quiet == "pair" and len(ready) == 1:  # its last batch before the next arrival
                later = [t for r, t in self.arrivals.items() if r not in self.taken]
                return b, min(later, default=1 << 62)
            return b

    formers: list[Quiet] = []

    def make(quiet):
        formers.append(Quiet(quiet))
        return formers[-1]

    cfg = PipelineConfig(groups=3, slots=2)
    asked, _ = both(cfg, lambda: make(False))
    told, _ = both(cfg, lambda: make(True))
    assert _trace_dict(told) == _trace_dict(asked)
    plain, ref, ker = formers[0].calls, formers[2].calls, formers[3].calls
    assert ref == ker  # the same questions in the same order
    # batch 0 at 0, 1 and 2 at 3, 3 at 40: no completion asked anybody
    assert [t for t, *_ in ref] == [0, 0, 3, 3, 3, 40, 40]  # a batch, then "nothing until …"
    # (batch, T): the last batch says "nothing until …" itself — one question fewer at each time
    paired, _ = both(cfg, lambda: make("pair"))
    assert _trace_dict(paired) == _trace_dict(asked)
    assert formers[4].calls == formers[5].calls
    assert [t for t, *_ in formers[4].calls] == [0, 3, 3, 40]
    assert len(plain) > len(ref) and {t for t, *_ in plain} > {0, 3, 40}


# ------------------------------------------------------------------------------------ randomised
def _random_batches(rng: random.Random, n: int) -> list[Batch]:
    out = []
    for i in range(n):
        layers = rng.randint(1, 5)
        dense = rng.randint(0, layers - 1) if rng.random() < 0.3 else 0
        attn = [rng.randint(0, 30) for _ in range(layers)]
        moe = [0 if layer < dense else rng.randint(1, 20) for layer in range(layers)]
        disp = [rng.randint(0, 7) for _ in range(layers)]
        comb = [rng.randint(0, 7) for _ in range(layers)]
        ready = rng.choice([0, 0, 5, 17, rng.randint(0, 100)])
        out.append(_batch(i * 7 + 3, attn, moe, disp, alone=rng.random() < 0.15, ready=ready, combine=comb))
    return out


def _random_config(rng: random.Random, groups: int) -> PipelineConfig:
    return PipelineConfig(
        groups=groups,
        slots=rng.choice([1, 2, 2, 3]),
        buffer_slots=rng.choice([1, 2, 3, 64, 1 << 62]),
        overlap=rng.random() < 0.6,
        comm_share=rng.choice([0.25, 0.5, 0.3, 1 / 3, 0.125]),
        launch_ns=rng.choice([0, 0, 3, 22]),
    )


@pytest.mark.parametrize("seed", range(60))
def test_random_runs_match_the_reference_span_for_span(seed):
    rng = random.Random(seed)
    groups = rng.randint(1, 4)
    batches = _random_batches(rng, rng.randint(1, 25))
    cfg = _random_config(rng, groups)
    ref, _ = both(cfg, lambda: StaticBatches(batches, groups=groups))
    ref_fifo, _ = both(cfg, lambda: FifoBatches(batches, groups=groups))
    # the ablation replay of PipelinedPolicy.run: the chosen schedule, placed, in the same service
    # order, with longer pool items (no super kernel, no overlap)
    longer = PipelineConfig(groups, cfg.slots, cfg.buffer_slots, False, cfg.comm_share, cfg.launch_ns + 4)
    for chosen, former in (
        (ref, StaticBatches(batches, groups=groups)),
        (ref_fifo, FifoBatches(batches, groups=groups)),
    ):
        both(
            longer,
            lambda f=former, c=chosen: f.placed(c.group_of),
            order=ServiceOrder.of(chosen),
            may_stall=cfg.buffer_slots < 64,
        )


def test_batches_of_other_integer_types_and_lists_are_read_the_same():
    # int32 arrays and plain lists go through the kernel's conversion (int64), not its fast path
    b = [
        Batch(0, 0, np.array([10, 4], np.int32), [1, 1], np.array([3, 3], np.int16), (1, 1)),
        Batch(1, 0, [4, 10], np.array([1, 1], np.uint8), [2, 2], np.array([1, 1])),
    ]
    _, ker = both(PipelineConfig(groups=2, slots=1), lambda: StaticBatches(b, 2, {0: 0, 1: 1}))
    assert ker.done == {0: 25, 1: 22}


# ------------------------------------------------------------------------- serving (online former)
def _stream(n: int, seed: int):
    from asaptrace.replay.whatif.simulate import ServingRequests

    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.08e9, n)).astype(np.int64)
    arrival[5:9] = arrival[5]  # simultaneous arrivals (ties in the wakeups)
    lengths = rng.choice([31, 500, 1500, 2100, 5000, 9000, 17000, 30000], n)  # > 16K: alone
    cached = np.where(rng.random(n) < 0.2, lengths // 3, 0)
    return ServingRequests(np.sort(arrival), lengths.astype(np.int64), cached.astype(np.int64))


@pytest.mark.parametrize("variant", ["asap", "asap-no-dual-batch", "asap-no-overlap", "asap-no-super-kernel"])
def test_serving_variants_give_identical_results_on_both_engines(variant, monkeypatch):
    from asaptrace.replay.policies import policy_of
    from asaptrace.replay.serving.scenario import load_scenario

    sc = load_scenario("asap-paper").with_knobs({"layers": 7})
    reqs = _stream(400, seed=len(variant))
    out = {}
    for engine in ("python", "c"):
        monkeypatch.setenv(pipeline_run.ENGINE_ENV, engine)
        out[engine] = policy_of(variant).serve(reqs, sc)
    ref, ker = out["python"], out["c"]
    for field in ("start_ns", "end_ns", "own_ns"):
        assert np.array_equal(getattr(ker, field), getattr(ref, field)), field
    assert (ker.steps, ker.layer_items, ker.events) == (ref.steps, ref.layer_items, ref.events)
    assert (ref.end_ns > 0).all()


# ------------------------------------------------------------------------ offline (a sample store)
@pytest.mark.parametrize(
    "params", [{}, {"dual_batch": False}, {"super_kernel": False, "overlap": False}, {"expert_failure": True}]
)
def test_offline_asap_replay_json_is_identical_on_both_engines(params, tmp_path_factory, monkeypatch):
    from asaptrace.pipeline import replay_store

    from ._replay_helpers import sample_store

    store = sample_store("coupled", tmp_path_factory.mktemp("kernel"))
    out = {}
    for engine in ("python", "c"):
        monkeypatch.setenv(pipeline_run.ENGINE_ENV, engine)
        # the DOMAIN cost model, not a fit: a least-squares fit can differ in its last digit from
        # one call to the next (threaded BLAS), which is not what this compares
        res = replay_store(store.path, "asap", params=params, costs=CostModel()).to_json()
        res.pop("seconds")  # wall time
        out[engine] = json.dumps(res, sort_keys=True)
    assert out["c"] == out["python"]
    assert '"makespan_ns"' in out["c"]


# ----------------------------------------------------------------------- selection and bad input
def test_engine_choice_env_and_fallback(monkeypatch):
    b = [_batch(0, [10], [10], [2])]
    with pytest.raises(UsageError, match="pipeline engine must be one of"):
        run_pipeline(PipelineConfig(groups=1), StaticBatches(b), engine="fortran")
    monkeypatch.setenv(pipeline_run.ENGINE_ENV, "gpu")
    with pytest.raises(UsageError, match="ASAPTRACE_PIPELINE_ENGINE"):
        run_pipeline(PipelineConfig(groups=1), StaticBatches(b))
    # not built: "auto" falls back to the reference silently, "c" says it was not built
    monkeypatch.delenv(pipeline_run.ENGINE_ENV)
    monkeypatch.setattr(pipeline_run, "_pkernel", None)
    assert run_pipeline(PipelineConfig(groups=1), StaticBatches(b)).done == {0: 24}
    with pytest.raises(UsageError, match="was not built"):
        run_pipeline(PipelineConfig(groups=1), StaticBatches(b), engine="c")


def test_the_kernel_is_what_auto_runs(monkeypatch):
    # a tell: the kernel's trace lists are built from its buffers, so patching the Python
    # Pipeline away must not matter to "auto"
    monkeypatch.setattr(pipeline_run, "Pipeline", None)
    b = [_batch(0, [10], [10], [2])]
    assert run_pipeline(PipelineConfig(groups=1), StaticBatches(b)).done == {0: 24}


def test_a_former_error_propagates_and_a_stall_is_reported_by_both():
    class Broken:
        def wakeups(self):
            return [0]

        def next_batch(self, now_ns, group, group_idle):
            raise RuntimeError("former exploded")

    for engine in ("python", "c"):
        with pytest.raises(RuntimeError, match="former exploded"):
            run_pipeline(PipelineConfig(groups=1), Broken(), engine=engine)
    # a fixed order that lacks an item: that item is never served → the run stalls
    b = [_batch(0, [10, 10], [10, 10], [0, 0])]
    order = ServiceOrder({0: [(0, 0), (0, 1)]}, [(0, 0)])
    for engine in ("python", "c"):
        with pytest.raises(AccountingError, match="stalled with 1 batches"):
            run_pipeline(PipelineConfig(groups=1), StaticBatches(b), order=order, engine=engine)


def test_a_batch_id_handed_out_twice_is_an_error_in_the_kernel():
    b = [_batch(0, [1], [1], [0]), _batch(0, [1], [1], [0])]
    with pytest.raises(ValueError, match="handed out batch id 0 twice"):
        run_pipeline(PipelineConfig(groups=2, slots=1), FifoBatches(b, groups=2), engine="c")


@pytest.mark.parametrize(
    ("costs", "overlap", "launch"),
    [({}, True, 0), ({}, False, 220_000), ({"attn_c1_ms": 0.0, "attn_c2_ms": 0.0}, True, 5)],
)
def test_own_shares_at_once_equal_the_per_batch_loop_to_the_bit(costs, overlap, launch):
    # the per-batch loop the vectorised shares replaced, written out here as the reference:
    # share = A·w/Σw + R·c/Σc per batch (w ≡ 1 when the attention has no variable cost)
    from types import SimpleNamespace

    from asaptrace.replay.mechanics.formers import batch_costs
    from asaptrace.replay.policies.pipelined_online import _distinct_costs, _own_shares, _totals

    model = CostModel(**costs)
    rng = np.random.default_rng(7)
    new = rng.integers(31, 32768, 300).tolist()
    cached = np.where(rng.random(300) < 0.3, rng.integers(0, 9000, 300), 0).tolist()
    order = rng.permutation(300).tolist()
    members, at = [], 0
    while at < 300:  # batches of 1–40 requests, some past 128 (numpy's pairwise block) when joined
        k = int(rng.integers(1, 41))
        members.append(order[at : at + k])
        at += k
    batches = {}
    for bid, reqs in enumerate(members):
        c = np.array([new[i] for i in reqs], np.float64)
        p = np.array([cached[i] for i in reqs], np.float64)
        arrays = batch_costs(model, c, p, layers=5, dense_layers=1, tp=4, experts=16)
        batches[bid] = Batch(bid, 0, *arrays)
    cfg = PipelineConfig(groups=1, overlap=overlap, comm_share=0.25, launch_ns=launch)
    former = SimpleNamespace(members=members, new=new, cached=cached, costs=model, own=np.zeros(300))
    index, distinct = _distinct_costs([batches[bid] for bid in range(len(members))])
    attn, rest = _totals(distinct, cfg)
    sizes = np.array([len(r) for r in members], np.int64)
    _own_shares(former, sizes, np.array([i for r in members for i in r], np.int64), attn[index], rest[index])
    expected = np.zeros(300)
    for bid, reqs in enumerate(members):
        b = batches[bid]
        c = np.array([new[i] for i in reqs], np.float64)
        w = model.attention_weight(c, np.array([cached[i] for i in reqs], np.float64))
        if w.sum() <= 0:
            w = np.ones_like(c)
        pool = b.moe_ns.astype(np.float64) + launch * (b.moe_ns > 0)
        if not overlap:
            pool += np.rint(0.25 * (b.dispatch_ns + b.combine_ns))
        rest = float((b.dispatch_ns + b.combine_ns).sum() + pool.sum())
        expected[reqs] += float(b.attention_ns.sum()) * w / w.sum() + rest * c / c.sum()
    assert np.array_equal(former.own, expected)
    assert (former.own > 0).all()


def test_a_negative_cost_is_an_event_in_the_past_on_both_engines():
    # attention −5 at t = 0: its AttentionDone would be at −5 ns, before the engine's clock
    b = [_batch(0, [-5], [1], [0])]
    messages = set()
    for engine in ("python", "c"):
        with pytest.raises(ValueError, match="in the past") as err:
            run_pipeline(PipelineConfig(groups=1), StaticBatches(b, 1, {0: 0}), engine=engine)
        messages.add(str(err.value))
    assert messages == {"event AttentionDone at -5 ns is in the past (0)"}


def test_wakeups_must_be_integer_ns_for_the_kernel():
    class Halves:
        def wakeups(self):
            return [0.5]

        def next_batch(self, now_ns, group, group_idle):
            return None

    with pytest.raises(UsageError, match="wakeup times must be integer ns, not float64"):
        run_pipeline(PipelineConfig(groups=1), Halves(), engine="c")


def test_a_store_clock_before_zero_runs_on_both_engines():
    # a batch ready at −8 µs (a store's own clock may start before 0): both engines start there
    b = [_batch(0, [3], [1], [0], ready=-8000)]
    done = set()
    for engine in ("python", "c"):
        trace = run_pipeline(PipelineConfig(groups=1), StaticBatches(b, 1, {0: 0}), engine=engine)
        done.add(tuple(sorted(trace.done.items())))
    assert len(done) == 1 and min(t for _, t in next(iter(done))) > -8000
