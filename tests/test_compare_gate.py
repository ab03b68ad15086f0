"""``compare`` as a CI gate: thresholds, the steps' noise band (worked by hand), verdicts and exit
codes on the samples, and the GitHub Actions example of docs/analyses/compare.md run as written."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import polars as pl
import pytest

from asaptrace.analyze.compare import compare
from asaptrace.analyze.gate import noise_band, parse_threshold, verdicts
from asaptrace.errors import UsageError
from tests._cli import run_cli

MS = 1_000_000
DOCS = Path(__file__).resolve().parents[1] / "docs" / "analyses" / "compare.md"


# ------------------------------------------------------------------------------------ noise, by hand
def test_paired_band_is_twice_the_standard_error_of_the_per_step_change():
    # d = (12 − 10, 21 − 20) = (2, 1): sd = √0.5, se = sd / √2 = 0.5, band = 2 · se = 1.0 (a mean);
    # a total over the 2 steps: 2 · sd · √2 = 2.0
    a, b = [(0, 10.0), (1, 20.0)], [(0, 12.0), (1, 21.0)]
    assert noise_band(a, b, "mean") == pytest.approx(1.0)
    assert noise_band(a, b, "sum") == pytest.approx(2.0)


def test_unpaired_band_is_welch_and_one_step_has_none():
    # other step numbers: sd_a = sd(10, 20) = √50, sd_b = sd(12, 14, 16) = 2:
    # band = 2 · √(50/2 + 4/3) = 2 · √26.333 = 10.263
    a, b = [(0, 10.0), (1, 20.0)], [(5, 12.0), (6, 14.0), (7, 16.0)]
    assert noise_band(a, b, "mean") == pytest.approx(2 * (25 + 4 / 3) ** 0.5)
    assert noise_band([(0, 10.0)], [(0, 12.0)], "mean") is None


def _run(step_ms: list[int]) -> dict[str, pl.DataFrame]:
    """Two ranks in DP groups 0 and 1, one step per entry of ``step_ms``; no wait, no imbalance rows."""
    rows = [(r, r, s, ms) for s, ms in enumerate(step_ms) for r in (0, 1)]
    bd = pl.DataFrame(rows, schema=["rank", "dp_group", "step", "step_time_ns"], orient="row").with_columns(
        pl.col("dp_group").cast(pl.Int32),
        pl.col("step").cast(pl.Int32),
        pl.col("step_time_ns") * MS,
        wait_ns=pl.lit(0),
        transfer_ns=pl.lit(0),
    )
    ov = pl.DataFrame(
        {
            "rank": [0, 1],
            "dp_group": [0, 1],
            "span_ns": [1] * 2,
            "compute_ns": [1] * 2,
            "comm_ns": [0] * 2,
            "overlapped_ns": [0] * 2,
        },
        schema_overrides={"dp_group": pl.Int32},
    )
    imb = pl.DataFrame(
        schema={
            "step": pl.Int32,
            "tokens_ratio": pl.Float64,
            "sum_sq_ratio": pl.Float64,
            "attention_ratio": pl.Float64,
        }
    )
    return {"step_breakdown": bd, "imbalance_by_step": imb, "overlap_by_rank": ov}


def _verdict(base: list[int], new: list[int], rule: str = "step_time>+5%") -> dict:
    a, b = _run(base), _run(new)
    table = verdicts(compare(a, b), a, b, [parse_threshold(rule)])
    return table.filter(pl.col("scope") == "run").row(0, named=True)


def test_a_steady_rise_beyond_the_threshold_fails():
    # steps 100, 200 ms → 110, 212 ms: mean 150 → 161 ms, +7.33 %; d = (10, 12): band = 2 ms = 1.33 %
    v = _verdict([100, 200], [110, 212])
    assert v["change"] == pytest.approx(11 / 150) and v["noise"] == pytest.approx(2 / 150)
    assert v["status"] == "fail"


def test_a_rise_within_the_steps_spread_is_noise_not_a_regression():
    # 100, 200 → 104, 218: the same +7.33 %, but d = (4, 18): sd = 9.90, band = 14 ms = 9.33 %
    v = _verdict([100, 200], [104, 218])
    assert v["change"] == pytest.approx(11 / 150) and v["noise"] == pytest.approx(14 / 150)
    assert v["status"] == "noise"


def test_a_fall_threshold_and_a_pass():
    assert _verdict([100, 200], [101, 202])["status"] == "pass"  # +1 % < +5 %
    assert _verdict([100, 200], [80, 160], "step_time<-10%")["status"] == "fail"  # −20 %, d = (−20, −40)


def test_a_rise_from_zero_is_beyond_any_threshold():
    # no exposed wait in BASE, some in NEW: no percentage exists, and the rise is a regression
    a, b = _run([100, 100]), _run([100, 100])
    b["step_breakdown"] = b["step_breakdown"].with_columns(wait_ns=pl.lit(5 * MS))
    table = verdicts(compare(a, b), a, b, [parse_threshold("exposed_wait>+10%")])
    run = table.filter(pl.col("scope") == "run").row(0, named=True)
    assert run["base"] == 0 and run["new"] == 10 * MS and run["change"] is None and run["status"] == "fail"
    same = verdicts(compare(a, a), a, a, [parse_threshold("exposed_wait>+10%")])
    assert set(same.get_column("status")) == {"pass"}


def test_one_step_has_no_band_and_the_threshold_alone_decides():
    v = _verdict([100], [106])
    assert v["noise"] is None and v["status"] == "fail"


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        ("step_time>5", "expected METRIC>+X%"),
        ("steptime>+5%", "unknown metric 'steptime'"),
        ("step_time=+5%", "expected METRIC>+X%"),
    ],
)
def test_bad_thresholds_are_named(rule, said):
    with pytest.raises(UsageError, match=re.escape(said)):
        parse_threshold(rule)


# --------------------------------------------------------------------------------------- on samples
@pytest.fixture(scope="module")
def stores(sample_run):
    return sample_run("coupled")[1].path, sample_run("coupled-hot-expert")[1].path


GATE = ["--fail-if", "step_time>+5%", "--fail-if", "exposed_wait>+10%"]


def test_a_store_against_itself_passes(stores):
    coupled, _ = stores
    r = run_cli("compare", str(coupled), str(coupled), *GATE)
    assert r.code == 0, r.stderr
    verdict_lines = [line for line in r.stdout.splitlines() if re.match(r"^(ok|FAIL|\?) ", line)]
    assert [line.split(":")[0] for line in verdict_lines] == ["ok step_time>+5%", "ok exposed_wait>+10%"]


def test_the_hot_expert_run_fails_the_gate_and_says_which(stores):
    """coupled-hot-expert against coupled: mean step time +9.3 % (noise ±2.8 %), exposed wait
    +17.9 % (noise ±14.0 %): both beyond their thresholds and their noise; exit 1."""
    coupled, hot = stores
    r = run_cli("compare", str(coupled), str(hot), *GATE)
    assert r.code == 1, (r.code, r.stderr)
    text = " ".join(r.stdout.split())
    assert "FAIL step_time>+5%: mean step time 7.033 s → 7.690 s, +9.3% (noise ±2.8%)" in text
    assert "FAIL exposed_wait>+10%: exposed wait 3.531 s → 4.162 s, +17.9% (noise ±14.0%)" in text
    assert "DP group 4 beyond it but within the noise" in text  # +13.9 % against ±14.2 %


def test_markdown_summary_and_thresholds_file(stores, tmp_path):
    coupled, hot = stores
    rules = tmp_path / "gate.toml"
    rules.write_text('fail-if = ["step_time>+5%", "overlap_efficiency<-10%"]\n')
    r = run_cli("compare", str(coupled), str(hot), "--thresholds", str(rules), "--format", "markdown")
    assert r.code == 1
    assert r.stdout.startswith("## asaptrace: regression\n")
    assert "- **FAIL** step_time>+5%" in r.stdout
    # overlap rose from 45.3 % to 51.7 %: not a fall; it has no per-step values, said
    assert (
        "- ok overlap_efficiency<-10%: overlap efficiency 45.3% → 51.7%, +14.1% (no per-step values)"
        in r.stdout
    )
    assert "| mean step time | 7.033 s | 7.690 s | +657.404 ms |" in r.stdout


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--fail-if", "step_time>+5"], "expected METRIC>+X%"),
        (["--thresholds", "missing.toml"], "cannot read the thresholds file"),
        (["--format", "html"], "must be text or markdown"),
    ],
)
def test_bad_gate_input_is_one_line_and_exit_2(stores, args, said):
    coupled, _ = stores
    r = run_cli("compare", str(coupled), str(coupled), *args)
    assert r.code == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_bad_thresholds_file_is_named(stores, tmp_path):
    coupled, _ = stores
    rules = tmp_path / "gate.toml"
    rules.write_text('fail_if = "step_time>+5%"\n')
    r = run_cli("compare", str(coupled), str(coupled), "--thresholds", str(rules))
    assert r.code == 2 and "gate.toml" in r.stderr and "fail-if" in r.stderr


def test_the_ci_example_in_the_docs_runs_as_written(stores):
    """The `asaptrace compare` line of the GitHub Actions YAML in docs/analyses/compare.md, with its
    stores swapped for the samples: exit 1 on the hot-expert run, 0 on a store against itself."""
    yaml = DOCS.read_text().split("```yaml", 1)[1].split("```", 1)[0]
    line = next(s.strip() for s in yaml.splitlines() if s.strip().startswith("asaptrace compare"))
    words = shlex.split(line.rsplit(" > ", 1)[0])[1:]
    assert words[1:3] == ["base.store", "new.store"], words
    coupled, hot = stores
    for new, code in ((hot, 1), (coupled, 0)):
        args = [str(coupled) if w == "base.store" else str(new) if w == "new.store" else w for w in words]
        r = run_cli(*args)
        assert r.code == code, (args, r.code, r.stderr)
        assert r.stdout.startswith("## asaptrace:"), r.stdout[:200]
