"""The SLO sweep: per policy, the rate → TTFT curve and the highest rate meeting a mean-TTFT SLO.

For each policy the sweep runs the serving simulation (:func:`asaptrace.replay.whatif.simulate.simulate`)
at every rate of a grid (given, or auto: 0.5, 1, 2, 4, … until the SLO is missed), all on one
request stream (common random numbers, :mod:`asaptrace.replay.serving.arrivals`). The SLO-compliant
throughput is found by bisection inside the grid bracket [last rate meeting the SLO, first rate
missing it] (``bisection_steps`` halvings), then linear interpolation of mean TTFT between the
final bracket's two ends. A policy that meets the SLO at every rate gets the largest rate and
``censored: true``; one that misses it at the lowest rate gets ``null``.

:func:`run_sweep` returns a :class:`SweepResult` (schema in docs/sweep.md): the curves, the SLO
throughput and its ratio to the first policy, the TTFT decomposition by length bucket, the mean
TTFT at 1 RPS, every knob used, the paper's numbers beside ours and a plain reading; nothing time-
or machine-dependent, so the same seed gives the same file byte for byte (the one-knob variations
and the calibration are :mod:`asaptrace.replay.whatif.sensitivity`'s).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from asaptrace.errors import RegistryError, UsageError
from asaptrace.executors import TaskPool, map_ordered, resolve_executor, session
from asaptrace.replay.costs import fit_warnings
from asaptrace.replay.policies import POLICIES, Policy, policy_of
from asaptrace.replay.policies.settings import OLD_NAMES, apply_settings, reaches, setting_key
from asaptrace.replay.serving import steady
from asaptrace.replay.serving.arrivals import ArrivalStream, make_stream
from asaptrace.replay.serving.capacity import binding, served_bounds
from asaptrace.replay.serving.scenario import Scenario, paper_for
from asaptrace.replay.whatif.simulate import policy_names, serving_policy, simulate
from asaptrace.replay.whatif.sweep_grid import curve_points, grid
from asaptrace.replay.whatif.sweep_point import point_stats
from asaptrace.replay.whatif.sweep_reading import costs_from, question_of, reading
from asaptrace.replay.whatif.sweep_result import SweepResult, median_over_seeds, slo_ratio

Progress = Callable[[str], None]


#: what ``asaptrace sweep`` compares unless told: the first is the ratios' baseline
DEFAULT_POLICIES = ("coupled", "chunked", "asap")


@dataclass(frozen=True)
class SweepOptions:
    """What to sweep (the scenario says under which knobs)."""

    policies: tuple[str, ...] = DEFAULT_POLICIES
    rates: tuple[float, ...] | None = None  # None: auto (doubling until the SLO is missed)
    bisection_steps: int = 4
    decomposition_rate: float = 4.0
    jobs: int = 1  # processes over (policy, rate) points (1: in this process; 0: one per core)
    workload: str | None = None  # a Mooncake JSONL / Azure CSV trace instead of Poisson
    lengths: str = "fit"  # "fit" (the scenario's log-logistic) or a synth length profile
    executor: str = "local"  # local (this machine, ``jobs``) or ray: one task per point
    ray_address: str | None = None  # ray: the cluster (default: a local instance of ``jobs`` CPUs)
    #: each rate's run extended past the duration to at least this many arrivals (DOMAIN §8: 2,000 on
    #: every face; a test may ask fewer, never a face) and to 20 SLO intervals (:mod:`...steady`)
    min_arrivals: int = steady.MIN_ARRIVALS
    #: the seeds the SLO search runs on (None: the scenario's one seed); the answer is their median
    seeds: tuple[int, ...] | None = None
    #: configured policy objects by label (advise: each what-if at its setting); a label not here
    #: is a spec of the registry (``asap``, ``afd-pingpong-m4``)
    configured: tuple[tuple[str, Policy], ...] = ()
    #: policy settings over every swept policy they reach (``asap.experts`` → 12; old names such as
    #: ``asap_experts`` routed: :mod:`asaptrace.replay.policies.settings`)
    settings: tuple[tuple[str, Any], ...] = ()
    #: the first seed's curve also runs the grid's low-load fractions (:func:`curve_points`, the
    #: picture's; ``advise --online``, which draws no curve, does not: the same answers)
    curve: bool = True

    def __post_init__(self) -> None:
        for key, _ in self.settings:
            setting_key(key, POLICIES)
        given = dict(self.configured)
        swept: list[Policy] = []
        for p in self.policies:
            try:
                pol = given[p] if p in given else policy_of(p)
            except RegistryError:
                raise UsageError(f"unknown policy {p!r} (known: {', '.join(policy_names())})") from None
            serving_policy(apply_settings(pol, self.settings))  # a bad setting: one line, before any run
            swept.append(pol)
        for key, _ in self.settings:  # a new-style setting must reach a swept policy (old names may not)
            if key not in OLD_NAMES and not any(reaches(key, pol) for pol in swept):
                raise UsageError(
                    f"setting {key!r} reaches none of the policies swept ({', '.join(self.policies)})"
                )
        if not self.policies:
            raise UsageError("no policies to sweep")
        if self.rates is not None and (not self.rates or min(self.rates) <= 0):
            raise UsageError("rates must be positive")
        if self.seeds is not None and not self.seeds:
            raise UsageError("--seeds needs at least one seed")


# ---------------------------------------------------------------------------------------- points
#: the streams built lately, newest last (a sweep's rates, seeds and policies share one); bounded and
#: keyed by the file's size and mtime: a long-lived process neither grows nor serves a stale file
_STREAMS: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_STREAMS_KEPT = 8


def _stream(sc: Scenario, opt: SweepOptions) -> Any:
    key = (sc.seed, sc.len_mean, sc.len_mode, sc.len_p90_at, sc.len_p98_at, sc.len_min, sc.len_max)
    key += (sc.prefix_cache, opt.workload, _file_stamp(opt.workload), opt.lengths)
    if key in _STREAMS:
        _STREAMS.move_to_end(key)
        return _STREAMS[key]
    stream = _STREAMS[key] = make_stream(sc, workload=opt.workload, lengths=opt.lengths)
    while len(_STREAMS) > _STREAMS_KEPT:
        _STREAMS.popitem(last=False)
    return stream


def _file_stamp(workload: str | Path | None) -> tuple[int, int] | None:
    """(size, mtime) of a workload file or store; None without one (or when gone: make_stream says so)."""
    if workload is None:
        return None
    try:
        st = Path(workload).stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def configured_policy(label: str, sc: Scenario, opt: SweepOptions) -> Policy:
    """The policy object a label serves: a configured one, or the registry's spec, with the
    options' settings that reach it (``--set asap.experts=12``)."""
    given = dict(opt.configured)
    pol = given[label] if label in given else policy_of(label)
    return apply_settings(pol, opt.settings) if opt.settings else pol


def capacity_of(label: str, sc: Scenario, opt: SweepOptions) -> dict[str, Any] | None:
    """A policy's capacity bounds on the requests a run at its bound serves (:func:`served_bounds`):
    per resource, the binding one, and their mean new tokens (None: the policy does not say)."""
    pol = configured_policy(label, sc, opt)
    run = steady.run_length(sc.duration_s, sc.slo_ttft_s, opt.min_arrivals)
    bounds, (new, _) = served_bounds(lambda n, p: pol.capacity(sc, n, p), _stream(sc, opt), *run)
    if not bounds:
        return None
    name, rate = binding(bounds)
    return {
        "bound_rps": round(rate, 4),
        "binding": name,
        "resources": {k: round(v, 4) for k, v in bounds.items()},
        "mean_new_tokens": round(float(new.mean()), 1),
    }


def evaluate(policy: str, rate: float, sc: Scenario, opt: SweepOptions) -> dict[str, Any]:
    """Simulate ``policy`` at ``rate`` on the scenario's stream for a steady-state run (at least
    ``min_arrivals`` arrivals and 20 SLO intervals, :func:`~asaptrace.replay.serving.steady.run_length`);
    one curve point, with its stability (:func:`~asaptrace.replay.serving.steady.steady_state`: the
    backlog does not grow over the second half of the arrivals) and the rate within the capacity
    bound of the requests it served: a rate offered at or above its own requests' bound is never
    stable, however short its backlog (DOMAIN §8)."""
    duration, least = steady.run_length(sc.duration_s, sc.slo_ttft_s, opt.min_arrivals)
    reqs = _stream(sc, opt).at_rate(rate, duration, least)
    pol = configured_policy(policy, sc, opt)
    res = simulate(pol, reqs, sc)
    row = point_stats(res, rate, reqs.seq_len)
    if len(reqs):
        row |= steady.steady_state(res)
        own = pol.capacity(sc, *reqs.lengths())
        row["stable"] = bool(row["stable"]) and (not own or rate < binding(own)[1])
    return row


def _point(args: tuple[str, float, Scenario, SweepOptions]) -> dict[str, Any]:
    return evaluate(*args)


class _Runner:
    """Evaluates points on the options' executor (this process, a process pool or one Ray task per
    point), remembering every one.

    The executor is opened once for the whole search, so the pool's spawned workers (≈ 1–2 s each
    for the imports; spawn, not fork, which can deadlock on polars / pyarrow threads) or the Ray
    instance serve every batch. Results are taken in the order asked, so the points, and the
    JSON built from them, are the same whichever executor ran them."""

    def __init__(
        self,
        sc: Scenario,
        opt: SweepOptions,
        progress: Progress | None,
        found: SeedSearch | None = None,
    ) -> None:
        self.sc, self.opt, self.progress = sc, opt, progress
        self.points: dict[tuple[str, float], dict[str, Any]] = dict(found.points) if found else {}
        # the stream's bounds: every point's (a finished search's own, when given)
        self.caps = dict(found.caps) if found else {p: capacity_of(p, sc, opt) for p in opt.policies}
        self.executor: Any = None  # opened at the first point, kept until close()
        self._session: Any = None

    def close(self) -> None:
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = None

    def run(self, wanted: Iterable[tuple[str, float]], *, kind: str = "grid") -> None:
        """Evaluate the points not evaluated yet; ``kind`` (grid, bisection, reference) is kept."""
        todo = [w for w in dict.fromkeys(wanted) if w not in self.points]
        if not todo:
            return
        if self._session is None:
            opt = self.opt
            self.executor = resolve_executor(opt.executor, jobs=opt.jobs, address=opt.ray_address)
            self._session = session(self.executor)
            self._session.__enter__()
        results = map_ordered(self.executor, _point, [(*w, self.sc, self.opt) for w in todo])
        for (p, r), row in zip(todo, results, strict=True):
            self.points[(p, r)] = row | {"kind": kind}
            if self.progress is not None:
                self.progress(f"{p} @ {r:g}/s")

    def mean(self, policy: str, rate: float) -> float:
        """The point's mean TTFT; infinite when it is not stable (its backlog grew: not
        SLO-compliant whatever its mean, :func:`~asaptrace.replay.serving.steady.search_ttft_ns`)."""
        return steady.search_ttft_ns(self.points[(policy, rate)])


# ----------------------------------------------------------------------------------- SLO search
def slo_rate(curve: list[tuple[float, float]], slo_ns: float) -> tuple[float | None, bool]:
    """Largest rate with mean TTFT ≤ SLO on a (rate, mean) curve, interpolated in its bracket.

    The bracket is [the highest rate meeting the SLO, the next rate above it]: no rate that met
    the SLO lies above the answer, however the curve dips. Returns (rate, censored): censored when
    the highest rate meets the SLO (the rate is then that one); ``None`` when no rate meets it.
    """
    pts = sorted(curve)
    ok = [i for i, (_, mean) in enumerate(pts) if mean <= slo_ns]
    if not ok:
        return None, False
    i = ok[-1]
    if i == len(pts) - 1:
        return pts[-1][0], True
    (r0, m0), (r1, m1) = pts[i], pts[i + 1]
    if not np.isfinite(m1) or m1 == m0:
        return r0, False
    return r0 + (r1 - r0) * (slo_ns - m0) / (m1 - m0), False


def _bracket(runner: _Runner, policy: str, rates: list[float], slo_ns: float) -> tuple[float, float] | None:
    ok = [r for r in rates if runner.mean(policy, r) <= slo_ns]
    bad = [r for r in rates if runner.mean(policy, r) > slo_ns]
    if not ok or not bad:
        return None
    lo = max(ok)
    above = [r for r in bad if r > lo]
    return (lo, min(above)) if above else None


def _search(runner: _Runner, policies: tuple[str, ...], grid: dict[str, list[float]], slo_ns: float) -> None:
    """Bisect every policy's bracket, all policies advancing together (one batch per halving)."""
    brackets = {p: _bracket(runner, p, grid[p], slo_ns) for p in policies}
    for _ in range(runner.opt.bisection_steps):
        mids = {p: round((b[0] + b[1]) / 2, 6) for p, b in brackets.items() if b is not None}
        runner.run(mids.items(), kind="bisection")
        for p, mid in mids.items():
            lo, hi = brackets[p]  # type: ignore[misc]
            brackets[p] = (mid, hi) if runner.mean(p, mid) <= slo_ns else (lo, mid)


def search_slo(
    sc: Scenario, opt: SweepOptions, *, progress: Progress | None = None, reference: bool = True
) -> tuple[dict[str, Any], _Runner]:
    """Grid + bisection for every policy; returns {policy: {slo_rps, censored}} and the points."""
    runner = _Runner(sc, opt, progress)
    try:
        slo_ns = sc.slo_ttft_s * 1e9
        _search(runner, opt.policies, grid(runner, slo_ns), slo_ns)
        if reference:  # before the answer: every point a table shows is one the answer read
            if opt.curve:
                curve_points(runner, opt.policies)
            runner.run(
                ((p, r) for r in (1.0, opt.decomposition_rate) for p in opt.policies), kind="reference"
            )
        out = {}
        for p in opt.policies:
            curve = [(r, runner.mean(q, r)) for (q, r) in runner.points if q == p]
            rate, censored = slo_rate(curve, slo_ns)
            out[p] = {"slo_rps": None if rate is None else round(rate, 4), "censored": censored}
        return out, runner
    finally:
        runner.close()


# ---------------------------------------------------------------------------------------- sweep
@dataclass(frozen=True)
class SeedSearch:
    """One seed's SLO search, as it travels back from a worker: its answer per policy
    ({slo_rps, censored}), every point it ran and its capacity bounds."""

    seed: int
    slo: dict[str, Any]
    points: dict[tuple[str, float], dict[str, Any]]
    caps: dict[str, Any]


def search_one_seed(
    sc: Scenario, opt: SweepOptions, reference: bool, progress: Progress | None = None
) -> SeedSearch:
    """:func:`search_slo` on ``sc``'s seed, kept whole (a task of :func:`submit_seeds`)."""
    slo, runner = search_slo(sc, opt, progress=progress, reference=reference)
    return SeedSearch(sc.seed, slo, runner.points, runner.caps)


def submit_seeds(
    sc: Scenario,
    opt: SweepOptions,
    pool: TaskPool,
    *,
    progress: Progress | None = None,
    reference: bool = True,
) -> list[list[Future[SeedSearch]]]:
    """The SLO search on every seed (the scenario's one without ``seeds``) submitted to ``pool``,
    the first seed's first (it alone runs the reference points; a caller may start work that waits
    on it while the others run): per seed its tasks, to read with :func:`gathered`. In this
    process a seed is one task, its policies advancing together; on worker processes each
    (seed, policy) is one (a policy's search reads only its own points, so the answer is the
    same), its points run there one after the other, and no progress is told."""
    seeds = list(opt.seeds or (sc.seed,))
    first = sc if seeds[0] == sc.seed else sc.with_knobs({"seed": seeds[0]})
    split = [opt]
    if not pool.inline:
        opt, progress = replace(opt, jobs=1, executor="local", ray_address=None), None
        split = [replace(opt, policies=(p,)) for p in opt.policies]
    return [
        [pool.submit(search_one_seed, s, o, reference and k == 0, progress) for o in split]
        for k, s in enumerate([first] + [sc.with_knobs({"seed": seed}) for seed in seeds[1:]])
    ]


def gathered(tasks: Iterable[Future[SeedSearch]]) -> SeedSearch:
    """One seed's search from its tasks' (:func:`submit_seeds`), waiting for each."""
    found = [t.result() for t in tasks]
    return SeedSearch(
        found[0].seed,
        {p: v for f in found for p, v in f.slo.items()},
        {k: v for f in found for k, v in f.points.items()},
        {p: v for f in found for p, v in f.caps.items()},
    )


def search_seeds(
    sc: Scenario, opt: SweepOptions, *, progress: Progress | None = None, reference: bool = True
) -> tuple[dict[str, Any], _Runner, Scenario]:
    """The SLO search on every seed in this process (:func:`submit_seeds`): :func:`median_over_seeds`,
    the first seed's runner and scenario. Every ``--vary`` row comes from here."""
    found = [gathered(t) for t in submit_seeds(sc, opt, TaskPool(1), progress=progress, reference=reference)]
    return seeded(sc, opt, found, progress)


def seeded(
    sc: Scenario, opt: SweepOptions, found: list[SeedSearch], progress: Progress | None = None
) -> tuple[dict[str, Any], _Runner, Scenario]:
    """The seeds' searches read together: their median and range, the first seed's runner (its
    points and bounds) and scenario."""
    first = sc if found[0].seed == sc.seed else sc.with_knobs({"seed": found[0].seed})
    runner = _Runner(first, opt, progress, found[0])
    return median_over_seeds([f.slo for f in found], opt.policies), runner, first


def run_sweep(
    sc: Scenario,
    opt: SweepOptions,
    *,
    progress: Progress | None = None,
    found: list[SeedSearch] | None = None,
) -> SweepResult:
    """The whole sweep (docs/sweep.md; its JSON: :meth:`SweepResult.to_json`): the SLO search on
    every seed (the answer is the median; curves and decomposition are the first seed's), each
    policy's capacity bound beside it. ``found``: the seeds' searches already run
    (:func:`submit_seeds` on a pool), read as they are."""
    seeds = list(opt.seeds or (sc.seed,))
    if found is None:
        over, runner, first = search_seeds(sc, opt, progress=progress)
    else:
        over, runner, first = seeded(sc, opt, found, progress)
    slo, ranges, per = over["slo"], over["range"], over["by_seed"]
    capacity = runner.caps  # the first seed's runner: its stream is ``first``'s
    runner.run(((p, opt.decomposition_rate) for p in opt.policies), kind="reference")
    curves = {
        p: [
            {k: v for k, v in runner.points[key].items() if k != "buckets"}
            for key in sorted(runner.points)
            if key[0] == p
        ]
        for p in opt.policies
    }
    decomposition = [
        {"policy": p} | b
        for p in opt.policies
        for b in runner.points[(p, opt.decomposition_rate)].get("buckets", [])
    ]
    result: dict[str, Any] = {
        "scenario": sc.name,
        "policies": list(opt.policies),
        "slo_ttft_ns": int(sc.slo_ttft_s * 1e9),
        "duration_ns": int(steady.run_length(sc.duration_s, sc.slo_ttft_s, 0)[0] * 1e9),
        "workload": _workload_text(first, opt),
        "slo_rps": {p: slo[p]["slo_rps"] for p in opt.policies},
        "slo_censored": {p: slo[p]["censored"] for p in opt.policies},
        "ratios": {p: slo_ratio(slo[p], slo[opt.policies[0]]) for p in opt.policies},
        "mean_ttft_ns_at_1rps": {p: runner.points[(p, 1.0)]["mean_ttft_ns"] for p in opt.policies},
        "curves": curves,
        "decomposition_rate": opt.decomposition_rate,
        "decomposition": decomposition,
        "knobs": sc.knobs(),
        "policy_settings": {p: configured_policy(p, first, opt).served() for p in opt.policies},
        "lengths_fit": sc.lengths.summary() if opt.workload is None and opt.lengths == "fit" else None,
        "paper": paper_for(sc.paper_numbers(), opt.policies),
        "costs_from": costs_from(sc),
        "cost_fit": sc.cost_fit,
        "cost_set": dict(sc.cost_set),
        "cost_warnings": fit_warnings(sc.cost_fit),
        "question": question_of(sc, opt),
        "capacity": {p: c for p, c in capacity.items() if c is not None},
        "seeds": seeds,
        "slo_by_seed": per,
        "slo_range": ranges,
        "slo_above_bound": steady.above_bound(per, capacity),
        "min_arrivals": opt.min_arrivals,
    }
    return SweepResult(**result, reading=reading(result))


def _workload_text(sc: Scenario, opt: SweepOptions) -> str:
    """What the requests were: Poisson with which lengths, a trace, or a store's requests resampled."""
    if opt.workload is None:
        return f"poisson, lengths {opt.lengths}"
    stream = _stream(sc, opt)
    if isinstance(stream, ArrivalStream):
        return stream.source
    return f"{opt.workload} (rescaled to each rate; resampled at a rate it is too short for)"
