"""The numbers the README and docs quote are the ones the code gives today.

The README's sample output and docs/analyses/advise.md's sample advice are checked against
reports/coupled.md — the coupled sample's report, which tests/test_report.py regenerates and
compares byte for byte, so a quote that drifts from the code fails here or there. The paper's
scenario table in docs/sweep.md is checked against a sweep run here (seed 0, as the doc says).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from tests._cli import run_cli

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "coupled.md"


def _numbered(lines: list[str]) -> dict[int, str]:
    """``1. text`` items, wrapped continuation lines joined, white space folded, severity marks and
    HTML escapes removed: the sentence as a reader reads it."""
    items: dict[int, str] = {}
    current = None
    for line in lines:
        if m := re.match(r"^(\d+)\. (.*)", line):
            current = int(m.group(1))
            items[current] = m.group(2)
        elif current is not None and line.startswith("   "):
            items[current] += " " + line.strip()
        else:
            current = None
    return {k: " ".join(html.unescape(v.replace("**", "")).split()) for k, v in items.items()}


def _section(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start + 1 : end]


def _block_after(text: str, marker: str) -> list[str]:
    """The lines of the fenced block that holds ``marker``, from the line after it."""
    start = text.index(marker) + len(marker)
    return text[start : text.index("```", start)].splitlines()


def _check_quotes(quoted: dict[int, str], truth: dict[int, str], where: str) -> None:
    """Each quoted item, cut at its '…' (what the quote left out), is a run of its item's text, in
    order; an item of the quote that is only '…' stands for the rest."""
    assert quoted, f"{where}: no numbered lines found"
    for n, text in quoted.items():
        assert n in truth, f"{where}: item {n} is not in {REPORT.name}"
        pos = 0
        for piece in (p.strip(" ;,") for p in text.split("…")):
            if not piece:
                continue
            found = truth[n].find(piece, pos)
            assert found >= 0, f"{where}, item {n}: {piece!r} is not what the code says: {truth[n]!r}"
            pos = found + len(piece)


def test_readme_sample_output_is_what_analyze_says():
    # README "What you get": findings 1–4 as `asaptrace analyze` prints them on the coupled sample
    quoted = _numbered(
        _block_after((ROOT / "README.md").read_text(), "$ asaptrace analyze out/coupled.store\n")
    )
    quoted = {n: re.sub(r"^(high|medium|low|info) ", "", t) for n, t in quoted.items()}
    truth = _numbered(_section(REPORT.read_text(), "## Summary"))
    truth = {n: re.sub(r"^(high|medium|low|info) ", "", t) for n, t in truth.items()}
    assert sorted(quoted) == [1, 2, 3, 4]
    _check_quotes(quoted, truth, "README.md")


def test_the_advice_example_is_what_advise_says():
    doc = (ROOT / "docs" / "analyses" / "advise.md").read_text()
    section = doc[doc.index("## On the coupled sample") :]
    quoted = _numbered(_block_after(section, "```\n"))
    truth = _numbered(_section(REPORT.read_text(), "## Advice"))
    assert sorted(quoted) == sorted(truth) == [1, 2, 3, 4, 5]
    _check_quotes(quoted, truth, "docs/analyses/advise.md")


def _paper_table() -> dict[str, list[str]]:
    text = _section((ROOT / "docs" / "sweep.md").read_text(), "## What the paper's scenario says")
    rows = {}
    for line in text:
        cells = [c.strip().replace("*", "") for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[0] not in ("policy", "---"):
            rows[cells[0].split(" (")[0]] = cells
    return rows


@pytest.fixture(scope="module")
def paper_sweep():
    """`asaptrace sweep` at its defaults (seed 0), the six policies of the doc's table (≈ 7 s)."""
    policies = "coupled,chunked,asap,asap-no-dual-batch,asap-no-overlap,asap-no-super-kernel"
    r = run_cli("sweep", "--jobs", "1", "--policies", policies, "--json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def test_the_paper_scenario_table_is_what_sweep_says(paper_sweep):
    rows = _paper_table()
    assert set(rows) == set(paper_sweep["slo_rps"])
    letter = {"coupled steps": "S", "MoE pool": "P", "attention groups": "A"}
    for policy, (_, rps, bound, ratio, _paper, _pratio, ttft, _pttft) in rows.items():
        cap = paper_sweep["capacity"][policy]
        assert rps == f"{paper_sweep['slo_rps'][policy]:.2f}", policy
        assert bound == f"{cap['bound_rps']:.2f} {letter[cap['binding']]}", policy
        assert ratio == f"{paper_sweep['ratios'][policy]:.2f}×", policy
        assert ttft == f"{paper_sweep['mean_ttft_ns_at_1rps'][policy] / 1e6:.0f} ms", policy


def test_the_status_speed_figures_are_the_performance_pages():
    # the status against the goals (moved from the README to docs/performance.md) quotes the ingest
    # goals; its ingest section's summary holds the measurements
    perf = " ".join((ROOT / "docs" / "performance.md").read_text().split())
    status = perf[perf.index("## Status against the goals") : perf.index("## Ingest: a folder of rank files")]
    sentence = re.search(r"The ingest speed goals.*?\)\. ", status)
    assert sentence, "docs/performance.md lost its status sentence on the ingest speed goals"
    figures = re.findall(r"\d[\d.]*(?:–[\d.]+)?(?: MB/s|×)", sentence.group(0))
    # 118–165 MB/s, 150 MB/s, 250 MB/s, 143–164 MB/s, 1.04–1.06×, 1.33×, 4.7×, 5.2–5.6×, 20×,
    # 10–16×, 1.5×
    assert len(figures) == 11, figures
    summary = re.search(r"\*\*In short:\*\*[^*]*", perf)
    assert summary, "docs/performance.md lost its summary of the ingest goals"
    missing = [f for f in figures if f not in summary.group(0)]
    assert missing == [], f"the status quotes {missing}, which docs/performance.md's summary does not say"
