"""The SLO search's grid (:mod:`asaptrace.replay.whatif.sweep_grid`), hand-worked on a curve whose
mean TTFT is the rate itself (so a rate meets an SLO of s exactly when it is ≤ s): the walk starts
at half the bound, goes up while rates meet and down while they miss, and stops at the bracket
the answer reads; the curve's low-load points come after, for a face that draws them."""

from __future__ import annotations

from dataclasses import dataclass, field

from asaptrace.replay.whatif.sweep_grid import bound_grid, curve_points


@dataclass
class Opt:
    rates: tuple | None = None
    min_arrivals: int = 2000


@dataclass
class FakeRunner:
    """Records the points run; a point's mean TTFT is its rate (monotone)."""

    caps: dict
    opt: Opt = field(default_factory=Opt)
    ran: list = field(default_factory=list)

    def run(self, wanted, kind="grid"):
        self.ran += [w for w in wanted if w not in self.ran]

    def mean(self, policy, rate):
        assert (policy, rate) in self.ran  # the answer reads only points that were run
        return rate


def test_the_walk_goes_up_from_half_the_bound_to_the_first_miss():
    r = FakeRunner({"a": {"bound_rps": 100.0}})
    grid = bound_grid(r, 80.0, {"a": 100.0})  # meets at 50 and 75, misses at 100
    assert grid == {"a": [50.0, 75.0, 100.0]}
    assert r.ran == [("a", 50.0), ("a", 75.0), ("a", 100.0)]  # 25 is never run: below a met rate


def test_the_walk_goes_down_to_the_first_rate_that_meets():
    r = FakeRunner({"a": {"bound_rps": 100.0}, "b": {"bound_rps": 100.0}})
    grid = bound_grid(r, 0.0, {"a": 100.0}) | bound_grid(r, 30.0, {"b": 100.0})
    # a meets nowhere: down to 1/64 of the bound; b misses at 50, meets at 25
    assert grid["a"] == [1.5625, 3.125, 6.25, 12.5, 25.0, 50.0]
    assert grid["b"] == [25.0, 50.0]


def test_every_policy_walks_its_own_way_and_the_curve_adds_its_low_end():
    bound = {"a": 100.0, "b": 10.0}
    r = FakeRunner({p: {"bound_rps": b} for p, b in bound.items()})
    grid = bound_grid(r, 60.0, bound)
    # a misses at 75; b meets at every fraction up to 1.25 × its bound (a censored answer)
    assert grid == {"a": [50.0, 75.0], "b": [5.0, 7.5, 10.0, 12.5]}
    curve_points(r, ("a", "b"))
    assert ("a", 25.0) in r.ran and ("b", 2.5) in r.ran
    r2 = FakeRunner({"x": None})
    curve_points(r2, ("x",))  # no bound: the grid was not the bound's, no curve points
    assert r2.ran == []
