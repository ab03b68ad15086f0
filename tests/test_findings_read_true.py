"""The findings of every sample store read true: each number in a sentence is one of the tables',
with the rounding the sentence shows; stock sentences appear only when their numbers say so; the
severity follows the cost at stake and the order agrees with it.

The numbers are parsed out of the text and compared with values computed here from the tables
(sums and means written out below), not with the finding's own ``data``.
"""

from __future__ import annotations

import math
import re

import polars as pl
import pytest

from tests.conftest import SAMPLE_RUNS

UNITS = {"s": 1e9, "ms": 1e6, "µs": 1e3, "ns": 1.0}
DUR = r"(\d+(?:\.\d+)?) (s|ms|µs|ns)"


def dur_ok(value: str, unit: str, expected_ns: float) -> bool:
    """The text shows 3 significant digits (0 decimals from 100 up): half its last digit of slack."""
    v = float(value)
    scale = UNITS[unit]
    # integers (ns, or 100 and up) are off by at most half a unit; else half the third digit
    whole = unit == "ns" or v >= 100 or v == 0
    tol = 0.5 if whole else 0.5 * 10 ** (math.floor(math.log10(v)) - 2)
    return abs(v * scale - expected_ns) <= tol * scale * 1.0001 + 1e-9


def pct_ok(text: str, share: float) -> bool:
    return abs(int(text) - 100 * share) <= 0.5 + 1e-9


def ratio_ok(text: str, value: float) -> bool:
    return abs(float(text) - value) <= 0.005 + 1e-9


def col_sum(df: pl.DataFrame, col: str) -> int:
    return int(df.get_column(col).sum())


def check_barrier_wait(text: str, t: dict, n: int) -> None:
    m = re.search(
        rf"cost (\d+)% of step time: {DUR} per rank on average over (\d+) ranks, of {DUR} of total "
        r"wait inside collective kernels, over (\d+) matched",
        text,
    )
    assert m, text
    bd, br = t["step_breakdown"], t["barrier_by_rank"]
    assert pct_ok(m[1], col_sum(bd, "wait_ns") / col_sum(bd, "step_time_ns"))
    assert int(m[4]) == n
    # exposed: the step breakdown's wait bucket = barrier_by_rank.exposed_wait_ns; total: wait_ns
    assert col_sum(br, "exposed_wait_ns") == col_sum(bd, "wait_ns")
    assert dur_ok(m[2], m[3], col_sum(br, "exposed_wait_ns") / n)
    assert dur_ok(m[5], m[6], col_sum(br, "wait_ns") / n)
    assert int(m[7]) == t["barrier_instances"].get_column("instance").n_unique()


def check_straggler_group(text: str, t: dict, n: int) -> None:
    m = re.search(r"DP group (\d+) arrived last at (\d+)% of barriers", text)
    assert m, text
    g = int(m[1])
    sg = t["straggler_groups"].filter(pl.col("dp_group") == g).row(0, named=True)
    assert pct_ok(m[2], sg["last_share"])
    row = t["barrier_by_group"].filter(pl.col("dp_group") == g).row(0, named=True)
    m = re.search(rf"held the barrier for {DUR} in all \(imposed wait\)", text)
    assert m and dur_ok(m[1], m[2], row["imposed_wait_ns"]), text
    others = col_sum(t["barrier_by_group"], "n_ranks") - row["n_ranks"]
    m = re.search(rf"the other (\d+) ranks waited {DUR} each \(total wait\)", text)
    assert m, text
    assert int(m[1]) == others
    assert dur_ok(m[2], m[3], row["caused_wait_ns"] / others)
    m = re.search(r"its Σs² was (\d+\.\d+)× the mean while its token count was (\d+\.\d+)× the mean", text)
    if m:
        imb = t["imbalance_by_group"].with_columns(
            sq=pl.col("sum_sq") / pl.col("sum_sq").mean().over("step"),
            tok=pl.col("tokens") / pl.col("tokens").mean().over("step"),
        )
        mine = imb.filter(pl.col("dp_group") == g)
        assert ratio_ok(m[1], mine.get_column("sq").mean())
        assert ratio_ok(m[2], mine.get_column("tok").mean())


def check_sumsq(text: str, t: dict, n: int) -> None:
    steps, fit = t["imbalance_by_step"], t["imbalance_fit"].row(0, named=True)
    m = re.search(r"Σs² was (\d+\.\d+)× the mean on average \(up to (\d+\.\d+)×\)", text)
    assert m, text
    sq = steps.get_column("sum_sq_ratio")
    assert ratio_ok(m[1], sq.mean()) and ratio_ok(m[2], sq.max())
    tok = steps.get_column("tokens_ratio").mean()
    m2 = re.search(r"while tokens were (\d+\.\d+)×", text)
    assert m2 and ratio_ok(m2[1], tok), text
    m3 = re.search(r"measured attention (\d+\.\d+)×", text)
    assert m3 and ratio_ok(m3[1], steps.get_column("attention_ratio").mean()), text
    # the stock sentence only when there is a barrier, tokens are balanced (≤ 1.10×) and Σs² is not (≥ 1.25×)
    balanced = t["barrier_instances"].height > 0 and tok <= 1.10 and sq.mean() >= 1.25
    assert ("Balanced token counts do not balance the barrier." in text) == balanced
    m = re.search(r"Σs² with R² = (\d\.\d\d)", text)
    assert m and ratio_ok(m[1], fit["r2"]), text
    m = re.search(r"accounts for at least (\d+)% of the exposed barrier wait", text)
    if m:
        assert t["barrier_instances"].height > 0
        assert pct_ok(m[1], fit["explained_wait_share"])
    m = re.search(r"ranks the groups' waits with R² = (\d\.\d\d)", text)
    if m:
        assert ratio_ok(m[1], fit["wait_r2"])


def check_overlap(text: str, t: dict, n: int) -> None:
    ov = t["overlap_by_rank"]
    m = re.search(rf"Overlap efficiency (\d+)%: of {DUR} of communication per rank, {DUR} is exposed", text)
    assert m, text
    comm, exposed = col_sum(ov, "comm_ns"), col_sum(ov, "exposed_comm_ns")
    assert pct_ok(m[1], col_sum(ov, "overlapped_ns") / comm)
    assert dur_ok(m[2], m[3], comm / n) and dur_ok(m[4], m[5], exposed / n)
    m = re.search(r"\((\d+)% of the device span, no compute running\)", text)
    assert m and pct_ok(m[1], exposed / col_sum(ov, "span_ns")), text
    # the exposed wait is the barrier finding's own (the breakdown's wait), the rest transfer
    wait = min(col_sum(t["step_breakdown"], "wait_ns"), exposed)
    m = re.search(
        rf"of which {DUR} is exposed barrier wait \(counted in the barrier-wait finding\) and {DUR} transfer",
        text,
    )
    # a barrier clause only in a run that has a barrier
    assert (m is not None) == (t["barrier_instances"].height > 0 and wait > 0), text
    if m:
        assert dur_ok(m[1], m[2], wait / n) and dur_ok(m[3], m[4], (exposed - wait) / n)


def check_longest(text: str, t: dict, n: int) -> None:
    m = re.search(rf"rank (\d+) waited {DUR} at .* for rank (\d+)\. (At|It was) the first", text)
    assert m, text
    worst = t["barrier_instances"].sort("wait_ns", descending=True).row(0, named=True)
    assert int(m[1]) == worst["rank"] and int(m[4]) == worst["last_rank"]
    assert dur_ok(m[2], m[3], worst["wait_ns"])


def check_ttft(text: str, t: dict, n: int) -> None:
    tb = t["ttft_by_bucket"].filter(pl.col("wait_share").is_not_null())
    first, last = tb.row(0, named=True), tb.row(tb.height - 1, named=True)
    m = re.search(r"(\S+) requests spend (\d+)% of their step waiting, (\S+) requests (\d+)%", text)
    assert m, text
    assert m[1] == first["bucket"] and m[3] == last["bucket"]
    assert pct_ok(m[2], first["wait_share"]) and pct_ok(m[4], last["wait_share"])
    m = re.search(rf"mean time to first token is {DUR} and {DUR}\.", text)
    assert m, text  # every sample records arrivals, so TTFT is known
    assert dur_ok(m[1], m[2], first["mean_ttft_ns"]) and dur_ok(m[3], m[4], last["mean_ttft_ns"])
    # "short requests pay" only when their share is at least 5 points above the longest bucket's
    assert text.startswith("Short requests pay") == (first["wait_share"] - last["wait_share"] >= 0.05)


def check_clock(text: str, t: dict, n: int) -> None:
    if "could not be aligned" in text:
        return
    c = t["clock"]
    m = re.search(rf"offsets span {DUR}.*residual at most {DUR}", text)
    assert m, text
    span = c.get_column("offset_ns").max() - c.get_column("offset_ns").min()
    assert dur_ok(m[1], m[2], span) and dur_ok(m[3], m[4], c.get_column("residual_ns").max())


def check_receive(text: str, t: dict, n: int) -> None:
    rec, bd = t["receive_waits"], t["step_breakdown"]
    m = re.search(
        rf"{DUR} of total wait per attention device in combine receives, over (\d+) attention devices, "
        rf"of which {DUR} is exposed \(compute idle\), (\d+(?:\.\d)?)% of all devices' step time",
        text,
    )
    assert m, text
    n_att = rec.get_column("rank").n_unique()
    assert int(m[3]) == n_att
    assert dur_ok(m[1], m[2], col_sum(rec, "wait_ns") / n_att)
    assert dur_ok(m[4], m[5], col_sum(bd, "wait_ns") / n_att)
    share = col_sum(bd, "wait_ns") / col_sum(bd, "step_time_ns")
    # whole percent from 1 % up, one decimal below it (a real wait never reads "0%")
    assert abs(float(m[6]) - 100 * share) <= (0.05 if "." in m[6] else 0.5) + 1e-9
    assert ("." in m[6]) == (share < 0.01)


def check_rank_straggler(text: str, t: dict, n: int) -> None:
    m = re.search(r"Rank (\d+) .* take (\d+\.\d+)× .*arrived last at (\d+)% of barriers", text)
    assert m, text
    r = t["stragglers"].filter(pl.col("rank") == int(m[1])).row(0, named=True)
    ratio = r["moe_ratio"] if "hot expert" in text else r["compute_ratio"]
    assert ratio_ok(m[2], ratio) and pct_ok(m[3], r["last_share"])
    m = re.search(rf"alone held them for {DUR} in all \(imposed wait\)", text)
    if m:
        # at each instance the rank reached last: release − the latest arrival among the others
        b = t["barrier_instances"]
        inst = b.filter(pl.col("last_rank") == r["rank"]).get_column("instance").unique()
        others = b.filter(pl.col("instance").is_in(inst.implode()) & (pl.col("rank") != r["rank"]))
        imposed = others.group_by("instance").agg(pl.col("release_ns").first() - pl.col("arrival_ns").max())
        assert dur_ok(m[1], m[2], col_sum(imposed, "release_ns"))


def check_utilisation(text: str, t: dict, n: int) -> None:
    for r in t["overlap_by_role"].iter_rows(named=True):
        m = re.search(rf"{r['role']} devices (\d+)% busy \(([\d,]+) bubbles, mean {DUR}\)", text)
        assert m, text
        assert pct_ok(m[1], r["utilisation"]) and int(m[2].replace(",", "")) == r["n_bubbles"]
        assert dur_ok(m[3], m[4], r["mean_bubble_ns"])


def check_idle(text: str, t: dict, n: int) -> None:
    m = re.search(
        rf"GPU idle (\d+)% of (?:each|the) step \({DUR} per rank of {DUR}\); (\d+)% of it "
        r"(waiting on the host|with the host blocked|with no host cause)",
        text,
    )
    assert m, text
    bd = t["step_breakdown"]
    idle = sum(col_sum(bd, c) for c in ("idle_host_ns", "idle_sync_ns", "idle_other_ns"))
    total = col_sum(bd, "step_time_ns")
    assert idle / total >= 0.01 and pct_ok(m.group(1), idle / total), text  # under 1 %: no sentence
    assert dur_ok(m.group(2), m.group(3), idle / n) and dur_ok(m.group(4), m.group(5), total / n), text
    cause = {"waiting on the host": "idle_host_ns", "with the host blocked": "idle_sync_ns"}.get(
        m.group(7), "idle_other_ns"
    )
    assert col_sum(bd, cause) == max(
        col_sum(bd, c) for c in ("idle_host_ns", "idle_sync_ns", "idle_other_ns")
    )
    assert pct_ok(m.group(6), col_sum(bd, cause) / idle), text


CHECKS = {
    "idle": check_idle,
    "barrier_wait": check_barrier_wait,
    "straggler_group": check_straggler_group,
    "sumsq_imbalance": check_sumsq,
    "overlap": check_overlap,
    "longest_wait": check_longest,
    "ttft_wait": check_ttft,
    "clock": check_clock,
    "receive_wait": check_receive,
    "hot_expert": check_rank_straggler,
    "slow_device": check_rank_straggler,
    "utilisation": check_utilisation,
}


@pytest.mark.parametrize("name", list(SAMPLE_RUNS))
def test_every_sentence_agrees_with_its_tables(sample_run, name):
    _, store, diag = sample_run(name)
    n = store.read("ranks").height
    assert diag.findings
    for f in diag.findings:
        assert "?" not in f.text, f.text
        assert f.code in CHECKS, f"no check for finding {f.code}: {f.text}"
        CHECKS[f.code](f.text, diag.tables, n)


@pytest.mark.parametrize("name", list(SAMPLE_RUNS))
def test_severity_follows_the_cost_and_the_order_agrees(sample_run, name):
    _, store, diag = sample_run(name)
    n = store.read("ranks").height
    step = col_sum(diag.tables["step_breakdown"], "step_time_ns") / n
    order = {"high": 0, "medium": 1, "low": 2, "info": 3}
    for f in diag.findings:
        if f.cost_ns is None:
            continue
        share = f.cost_ns / step
        expected = (
            "info" if f.cost_ns <= 0 else "high" if share >= 0.10 else "medium" if share >= 0.03 else "low"
        )
        assert f.severity == expected, (f.code, f.cost_ns, share)
    ranks = [order[f.severity] for f in diag.findings]
    assert ranks == sorted(ranks)
    # within a severity, by the time at stake no other finding counts (docs/analyses/findings.md)
    key = [(order[f.severity], -((f.cost_ns or 0) - f.data.get("counted_ns", 0))) for f in diag.findings]
    assert key == sorted(key)


def test_straggler_cost_is_the_wait_it_imposed_on_the_others(sample_run):
    # the group alone held the barrier imposed_wait_ns in all; the other ranks would not have
    # waited that long had it been as fast as the next group: imposed × others / ranks per rank
    _, store, diag = sample_run("coupled")
    n = store.read("ranks").height
    f = next(f for f in diag.findings if f.code == "straggler_group")
    bg = diag.tables["barrier_by_group"]
    row = bg.filter(pl.col("dp_group") == f.data["dp_group"]).row(0, named=True)
    others = col_sum(bg, "n_ranks") - row["n_ranks"]
    assert f.cost_ns == row["imposed_wait_ns"] * others // n
