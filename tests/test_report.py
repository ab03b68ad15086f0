"""The HTML/Markdown report: sections, headline numbers equal to `analyze --json`, escaping, the CLI faces."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from tests._cli import run_cli
from tests._report_helpers import IMG_NAME, SCRIPT_COLLECTIVE, SCRIPT_KERNEL, hostile_store

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("summary", "headline", "figures", "tables", "provenance", "command")
FIGURES = (
    "fig-timeline",
    "fig-wait-heatmap",
    "fig-imposed-wait",
    "fig-rank-bars",
    "fig-group-bars",
    "fig-attention-sumsq",
    "fig-imbalance-ratios",
    "fig-overlap",
)


@pytest.fixture(scope="module")
def coupled_report(coupled_store, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("report") / "coupled.html"
    r = run_cli("report", coupled_store.path, "-o", out)
    assert r.code == 0, r.stderr
    return out.read_text()


@pytest.fixture(scope="module")
def analyze_json(coupled_store) -> dict:
    r = run_cli("analyze", coupled_store.path, "--json")
    assert r.code == 0
    return json.loads(r.stdout)


def test_every_section_and_figure_is_there_and_plotly_is_inlined_once(coupled_report):
    for sid in SECTIONS:
        assert f'<section id="{sid}">' in coupled_report
    for fid in FIGURES:
        assert coupled_report.count(f'<div id="{fid}">') == 1
        assert f'"{fid}":{{' in coupled_report  # its data is drawn by the one script
    # plotly.js once (its bundle starts with this banner), and nothing loaded from elsewhere
    assert coupled_report.count("plotly.js v") == 1
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import|url\(http", coupled_report)
    assert len(coupled_report.encode()) < 10 * 1024**2


def test_headline_numbers_equal_analyze_json(coupled_report, analyze_json):
    t = analyze_json["tables"]
    bd, ov, imb = t["step_breakdown"], t["overlap_by_rank"], t["imbalance_by_step"]
    n_ranks = len({r["rank"] for r in bd})
    want = {
        "n_ranks": n_ranks,
        "mean_step_time_ns": sum(r["step_time_ns"] for r in bd) / len(bd),
        "exposed_wait_ns": sum(r["wait_ns"] for r in bd) / n_ranks,
        "wait_share": sum(r["wait_ns"] for r in bd) / sum(r["step_time_ns"] for r in bd),
        "transfer_ns": sum(r["transfer_ns"] for r in bd) / n_ranks,
        "sum_sq_ratio": sum(r["sum_sq_ratio"] for r in imb) / len(imb),
        "tokens_ratio": sum(r["tokens_ratio"] for r in imb) / len(imb),
        "overlap_efficiency": sum(r["overlapped_ns"] for r in ov) / sum(r["comm_ns"] for r in ov),
        "utilisation": sum(r["compute_ns"] for r in ov) / sum(r["span_ns"] for r in ov),
    }
    got = {m: float(v) for m, v in re.findall(r'data-metric="(\w+)" data-value="([^"]+)"', coupled_report)}
    for metric, value in want.items():
        assert got[metric] == pytest.approx(value, rel=1e-12), metric
    # the barrier finding's share, as the summary sentence says it
    share = next(f for f in analyze_json["findings"] if f["code"] == "barrier_wait")["data"]["wait_share"]
    assert f"of which {100 * share:.1f}% is exposed" in coupled_report
    # every finding, in order, as plain words at the top
    texts = [
        unescape(m)
        for m in re.findall(r'<li data-code="\w+"><span[^>]*>\w+</span>(.*?)</li>', coupled_report)
    ]
    assert texts == [f["text"] for f in analyze_json["findings"]]


def test_provenance_shows_sources_with_hashes_accounting_clock_and_command(coupled_store, coupled_report):
    meta = coupled_store.meta
    for s in meta["sources"][:3]:
        assert s["sha256"] in coupled_report
    acc = meta["accounting"]
    assert f"read {acc['read']:,} = kept {acc['kept']:,}" in coupled_report
    assert "deepep+nccl+common" in coupled_report and "largest residual" in coupled_report
    cmd = re.search(r'<pre class="command">([^<]*)</pre>', coupled_report).group(1)
    assert cmd.startswith(f"asaptrace report {coupled_store.path} --output ") and cmd.endswith("coupled.html")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    store = hostile_store(tmp)
    out = tmp / "hostile.html"
    assert run_cli("report", store.path, "-o", out).code == 0
    return store, out


def test_trace_strings_are_escaped(hostile):
    html = hostile[1].read_text()
    for raw in (SCRIPT_KERNEL, SCRIPT_COLLECTIVE, IMG_NAME, "<img"):
        assert raw not in html
    # the kernel shows in the timeline as inert text; the collective in a finding; the file in provenance
    assert r"&lt;script&gt;alert(1)&lt;\u002fscript&gt;" in html
    assert "nccl_AllReduce&lt;script&gt;alert" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in html


def test_markdown_variant_has_the_same_findings_and_escapes(hostile, tmp_path):
    store, _ = hostile
    out = tmp_path / "r.md"
    assert run_cli("report", store.path, "--format", "md", "-o", out).code == 0
    md = out.read_text()
    assert md.startswith("# asaptrace report") and "## Provenance" in md and "## Command" in md
    # no tag can open (every `<` before a letter or `/` is backslash-escaped) and no HTML entity is
    # written: the raw file reads like the trace, a renderer shows the escaped `<` as a plain `<`
    assert not re.search(r"(?<!\\)<[A-Za-z/!?]", md) and "&lt;" not in md and "&amp;" not in md
    assert (
        r"nccl_AllReduce\<script>alert" in md
        and r'"\>' not in md
        and r'">\<img src=x onerror=alert(1)>' in md
    )


def test_markdown_text_keeps_kernel_names_readable():
    # a templated kernel name is the common case: `<4` opens no tag, so it stays verbatim; a pipe
    # would split the table cell, so it is escaped, even in a code span (GitHub unescapes it there);
    # a code span's inside shows literally, so `<file>` in one is left alone
    from asaptrace.report.render import _md

    assert _md("void k<4, bf16>(float*)") == "void k<4, bf16>(float*)"
    assert _md("a|b `c|d <file>` <e>") == r"a\|b `c\|d <file>` \<e>"
    assert _md("x&lt;y & z\nnext") == r"x\&lt;y & z next"


def test_bad_store_or_output_is_one_line_and_exit_2(coupled_store, tmp_path):
    r = run_cli("report", tmp_path / "nope.store", "-o", tmp_path / "r.html")
    assert r.code == 2 and "nope.store: no such store directory" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("report", coupled_store.path, "-o", tmp_path / "missing" / "r.html")
    assert r.code == 2 and "its folder does not exist" in r.stderr
    r = run_cli("export", coupled_store.path, "-o", tmp_path)
    assert r.code == 2 and "is a directory" in r.stderr
    r = run_cli("export", coupled_store.path, "--format", "svg", "-o", tmp_path / "t.json")
    assert r.code == 2 and "unknown export format 'svg' (known: perfetto)" in r.stderr
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_compare_cli_and_report_section(coupled_store, tmp_path):
    r = run_cli("compare", coupled_store.path, coupled_store.path, "--json")
    overall = {row["metric"]: row for row in json.loads(r.stdout)["tables"]["compare_overall"]}
    assert overall["mean_step_time_ns"]["delta"] == 0 and overall["mean_step_time_ns"]["ratio"] == 1
    out = tmp_path / "c.html"
    assert run_cli("report", coupled_store.path, "--compare", coupled_store.path, "-o", out).code == 0
    html = out.read_text()
    assert '<section id="compare">' in html and 'id="table-compare-by-group"' in html


def test_export_cli_writes_a_trace_ingest_reads_back(coupled_store, tmp_path):
    r = run_cli("export", coupled_store.path, "--per-rank", "-o", tmp_path / "ranks")
    assert r.code == 0 and len(list((tmp_path / "ranks").glob("rank*.json.gz"))) == 32
    r = run_cli("ingest", tmp_path / "ranks", "-o", tmp_path / "back.store", "--no-enrich", "--json")
    assert r.code == 0 and json.loads(r.stdout)["n_ranks"] == 32


def test_sample_reports_are_current(tmp_path):
    """reports/ is what `python reports/regenerate.py` writes today (run it after changing the report)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("regenerate", ROOT / "reports" / "regenerate.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    for path in module.regenerate(tmp_path):
        committed = ROOT / "reports" / path.name
        assert committed.is_file(), f"{committed} is missing: run python reports/regenerate.py"
        assert committed.read_bytes() == path.read_bytes(), (
            f"{committed} is stale: run python reports/regenerate.py"
        )


def test_a_single_rank_is_its_own_clock_not_a_rank_left_unaligned(tmp_path):
    # one rank: the clock status is single_rank, the rank is the reference; its residual is null
    # (nothing to compare with), which must not read as "1 rank not aligned"
    from asaptrace import pipeline
    from tests._analysis_helpers import GEMM, RankTrace, ingest, write_traces

    t = RankTrace(rank=0, world=1)
    t.annotation("step[EXTEND bs=1 toks=8]", 0, 500)
    t.kernel(GEMM, 100, 100, launch_at=50)
    store = pipeline.enrich_store(ingest(write_traces(tmp_path / "t", [t]), tmp_path / "s"))
    out = tmp_path / "r.md"
    assert run_cli("report", store.path, "--format", "md", "-o", out).code == 0
    clock = next(line for line in out.read_text().splitlines() if line.startswith("- clock alignment"))
    assert "status one rank, nothing to align; reference rank 0" in clock
    assert "largest offset –" in clock and clock.endswith("ranks not aligned 0")
