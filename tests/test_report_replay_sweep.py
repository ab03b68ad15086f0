"""The report's Replay section (``--replay``) and Sweep section (``--sweep``), and their bad inputs."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import pytest

from asaptrace import pipeline
from asaptrace.views.sweep import BINDING_SHORT
from tests._cli import run_cli


def _section(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}">')
    return html[start : html.index("</section>", start)]


def _table(html: str, tid: str) -> tuple[list[str], list[list[str]]]:
    """Headers and cell texts of the table with id ``tid`` (unescaped, as a reader sees them)."""
    start = html.index(f'id="{tid}"')
    body = html[start : html.index("</table>", start)]

    def texts(row: str, tag: str) -> list[str]:
        return [
            unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(rf"<{tag}[^>]*>(.*?)</{tag}>", row, re.S)
        ]

    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    return texts(rows[0], "th"), [texts(r, "td") for r in rows[1:]]


@pytest.fixture(scope="module")
def replayed(coupled_store, tmp_path_factory):
    """The coupled sample replayed under asap (default 4×4 attention + 16 experts), as a store."""
    out = tmp_path_factory.mktemp("replay") / "asap.store"
    result = pipeline.replay_store(coupled_store.path, "asap", out=out)
    return result.to_json(), out


@pytest.fixture(scope="module")
def sweep_file(tmp_path_factory) -> tuple[dict, Path]:
    """A tiny sweep: default and asap at 1 and 40 requests/s for 20 s each (default misses the SLO at
    40/s, so its SLO throughput is found by bisection, not censored)."""
    out = tmp_path_factory.mktemp("sweep") / "sweep.json"
    pipeline.sweep(
        "asap-paper", policies=("default", "asap"), rates=(1.0, 40.0), knobs={"duration_s": 20}, out=out
    )
    return json.loads(out.read_text()), out


@pytest.fixture(scope="module")
def report(coupled_store, replayed, sweep_file, tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("report") / "r.html"
    r = run_cli("report", coupled_store.path, "--replay", replayed[1], "--sweep", sweep_file[1], "-o", out)
    assert r.code == 0, r.stderr
    return out.read_text()


def test_replay_section_has_the_recovered_numbers_of_the_replay_json(report, replayed):
    result, _ = replayed
    section = _section(report, "replay-1")
    assert "Replay: asap (asap.store)" in section
    headers, rows = _table(section, "table-replay-1-recovered")
    # the report shows one column unit, chosen from the largest value: seconds for these (≈ 10 s),
    # three decimals with thousands separators
    assert headers[:2] == ["cause", "deployment"] and headers[3] == "recovered (s)"
    want = {c.replace("_", " "): f"{v / 1e9:,.3f}" for c, v in result["recovered_ns"].items()}
    shown = {r[0]: r[3] for r in rows}
    assert {c: shown[c] for c in want} == want
    total = result["reference_makespan_ns"] - result["makespan_ns"]
    assert shown["total"] == f"{total / 1e9:,.3f}"
    # every cause at the store's 32 devices: the deployment column says so
    assert all(r[1] == "4×4 + 16" for r in rows), rows
    # the reference is a consistency check, not an error bar; the band comes from the fit
    assert "consistency check: the coupled replay differs from the measured steps by 0.00% mean" in section
    assert "exact by construction" in section and "from the fit&#39;s residual p95" in section
    headers, rows = _table(section, "table-replay-1-fit")
    assert {r[0] for r in rows} == {"attention", "moe", "transfer"}
    assert [r[1] for r in rows] == [result["cost_fit"][p]["status"] for p in ("attention", "moe", "transfer")]


def test_replay_section_has_steps_waterfall_and_measured_vs_replayed_compare(report, replayed):
    result, _ = replayed
    section = _section(report, "replay-1")
    headers, rows = _table(section, "table-replay-1-makespan")
    assert rows[2][1] == f"{result['makespan_ns'] / 1e9:,.3f}"
    headers, rows = _table(section, "table-replay-1-steps")
    assert headers[0] == "step" and len(headers) == 4
    assert [r[3] for r in rows] == [f"{s['replayed_ns'] / 1e9:,.3f}" for s in result["steps"]]
    for fid in ("fig-replay-1-steps", "fig-replay-1-recovered"):
        assert report.count(f'<div id="{fid}">') == 1 and f'"{fid}":{{' in report
    # the waterfall starts at the reference replay's makespan of the replay's JSON, in seconds
    figures = report[report.index('"fig-replay-1-recovered":') :]
    base_s = float(f"{result['reference_makespan_ns'] / 1e9:.6g}")
    assert f'"y":[{base_s},' in figures.replace(" ", "")
    headers, rows = _table(section, "table-replay-1-compare-overall")
    assert headers == ["metric", "measured", "replayed", "delta", "ratio"]
    assert [r[0] for r in rows][:3] == ["ranks", "steps", "mean step time"]
    assert 'id="table-replay-1-compare-by-group"' in section


def test_replay_section_shows_the_vary_tornado(coupled_store, tmp_path):
    out = tmp_path / "v.store"
    res = run_cli("replay", coupled_store.path, "--vary", "k_s=1,2", "--vary", "scale=0.5,2", "-o", out)
    assert res.code == 0, res.stderr
    html = tmp_path / "v.html"
    assert run_cli("report", coupled_store.path, "--replay", out, "-o", html).code == 0
    text = html.read_text()
    section = _section(text, "replay-1")
    assert text.count('<div id="fig-replay-1-tornado">') == 1
    _headers, rows = _table(section, "table-replay-1-vary")
    assert [(r[0], r[1]) for r in rows] == [("k_s", "1"), ("k_s", "2"), ("scale", "0.5"), ("scale", "2")]


def test_sweep_section_has_the_slo_numbers_and_the_papers(report, sweep_file):
    result, _ = sweep_file
    section = _section(report, "sweep")
    headers, rows = _table(section, "table-sweep-slo")
    # the CLI's table (views.sweep): every SLO throughput beside its capacity bound
    assert headers[:5] == ["policy", "SLO RPS", "bound", "ratio", "paper RPS"]
    by_policy = {r[0]: r for r in rows}
    for p in ("default", "asap"):
        rps, censored = result["slo_rps"][p], result["slo_censored"][p]
        assert by_policy[p][1] == ("≥ " if censored else "") + f"{rps:.2f}"
        # the paper's figures also under the old name swept (its "Default" is our coupled)
        assert by_policy[p][4] == f"{result['paper']['slo_rps'][p]:g}"  # 6.8, 20
        cap = result["capacity"][p]  # "6.37 S": the bound, its binding resource by its letter
        assert by_policy[p][2] == f"{cap['bound_rps']:.2f} {BINDING_SHORT[cap['binding']]}"
        assert rps <= cap["bound_rps"] * 1.05
    assert not result["slo_censored"]["default"]  # default misses at 40/s: a real, bisected number
    assert unescape(result["reading"]) in unescape(section)
    assert "from the paper's own cost figures (docs/analyses/replay.md) at face value and" in unescape(
        section
    )
    for fid in ("fig-sweep-curves", "fig-sweep-quantiles"):
        assert report.count(f'<div id="{fid}">') == 1
    assert "fig-sweep-tornado" not in report  # nothing varied


def test_bad_replay_store_or_sweep_file_is_one_line_exit_2_nothing_written(
    coupled_store, sweep_file, tmp_path
):
    out = tmp_path / "out" / "r.html"
    out.parent.mkdir()
    not_json = tmp_path / "sweep.json"
    not_json.write_text("{not json")
    other_json = tmp_path / "other.json"
    other_json.write_text(json.dumps({"schema_version": 1, "n_ranks": 32}))
    cases = [
        (("--replay", tmp_path / "nope.store"), "nope.store: no such store directory"),
        (("--replay", coupled_store.path), "is not a replayed store (its meta.json has no replay block)"),
        (("--sweep", not_json), "sweep.json: is not a sweep results JSON"),
        (("--sweep", other_json), "other.json: is not a sweep results JSON (expects the keys"),
        (("--sweep", tmp_path / "none.json"), "none.json: no such sweep results file"),
    ]
    for args, message in cases:
        r = run_cli("report", coupled_store.path, *args, "-o", out)
        assert r.code == 2, (args, r.stdout, r.stderr)
        assert message in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert not list(out.parent.iterdir())  # nothing written


def test_hand_made_results_with_vary_rows_add_the_tornado_and_escape_knob_names(coupled_store, tmp_path):
    # a hand-made results file following docs/reference/sweep-json.md: default 2.00/s, asap 3.00/s,
    # one knob varied (its name is hostile); the tornado and the vary table appear, escaped
    result = {
        "schema_version": 1,
        "scenario": "hand",
        "policies": ["default", "asap"],
        "slo_ttft_ns": 5_000_000_000,
        "workload": "poisson, lengths fit",
        "slo_rps": {"default": 2.0, "asap": 3.0},
        "slo_censored": {"default": False, "asap": False},
        "ratios": {"default": 1.0, "asap": 1.5},
        "mean_ttft_ns_at_1rps": {"default": 600_000_000, "asap": 300_000_000},
        "curves": {
            "default": [{"rate": 1.0, "mean_ttft_ns": 600_000_000, "p50_ttft_ns": 5e8, "p99_ttft_ns": 9e8}],
            "asap": [{"rate": 1.0, "mean_ttft_ns": 300_000_000, "p50_ttft_ns": 2e8, "p99_ttft_ns": 4e8}],
        },
        "paper": {"slo_rps": {"default": 6.8, "asap": 20.0}},
        "reading": "hand-made <b>reading</b>",
        "vary": [
            {
                "knob": "<script>alert(1)</script>",
                "value": "1",
                "slo_rps": {"default": 2.0, "asap": 3.0},
                "ratio": 1.5,
            },
            {
                "knob": "<script>alert(1)</script>",
                "value": "2",
                "slo_rps": {"default": 2.0, "asap": 2.4},
                "ratio": 1.2,
            },
        ],
        "tornado": [
            {
                "knob": "<script>alert(1)</script>",
                "ratio_min": 1.2,
                "ratio_max": 1.5,
                "at_min": "2",
                "at_max": "1",
            }
        ],
    }
    path = tmp_path / "hand.json"
    path.write_text(json.dumps(result))
    out = tmp_path / "r.md.html"
    assert run_cli("report", coupled_store.path, "--sweep", path, "-o", out).code == 0
    html = out.read_text()
    _, rows = _table(html, "table-sweep-slo")
    # ratio 1.5 shown as 1.50×; the paper's ratio 20 / 6.8 = 2.94×; a file without capacity
    # bounds (before schema 3) shows none ("–"), never a made-up one
    assert [r[:6] for r in rows] == [
        ["default", "2.00", "–", "1.00×", "6.8", "1.00×"],
        ["asap", "3.00", "–", "1.50×", "20", "2.94×"],
    ]
    assert '<div id="fig-sweep-tornado">' in html and 'id="table-sweep-vary"' in html
    assert "<script>alert(1)</script>" not in html and "<b>reading</b>" not in html
    assert "hand-made &lt;b&gt;reading&lt;/b&gt;" in html
    # a schema_version 1 file does not say where its costs came from, and the section says so
    assert "a schema_version 1 file does not record where they came from" in html


def test_the_report_shows_the_command_with_every_replay_and_the_sweep(report):
    cmd = unescape(re.search(r'<pre class="command">([^<]*)</pre>', report).group(1))
    assert " --replay " in cmd and cmd.count("--replay") == 1 and "asap.store" in cmd
    assert " --sweep " in cmd and "sweep.json" in cmd


def test_a_hostile_replayed_store_name_is_escaped_in_html_and_markdown(coupled_store, replayed, tmp_path):
    import shutil

    name = '"><img src=x onerror=alert(1)>.store'
    shutil.copytree(replayed[1], tmp_path / name)
    for fmt in ("html", "md"):
        out = tmp_path / f"r.{fmt}"
        r = run_cli("report", coupled_store.path, "--replay", tmp_path / name, "--format", fmt, "-o", out)
        assert r.code == 0, r.stderr
        text = out.read_text()
        if fmt == "md":  # the command is quoted in a fenced code block, where Markdown shows it literally
            text = re.sub(r"```.*?```", "", text, flags=re.S)
        if fmt == "html":
            assert "<img" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
        else:  # Markdown: the tag is backslash-escaped, so it renders as text and reads as the name
            assert not re.search(r"(?<!\\)<img", text) and r'">\<img src=x onerror=alert(1)>.store' in text


def test_the_report_of_a_replayed_store_names_the_replay_and_its_error_in_the_provenance(replayed, tmp_path):
    result, path = replayed
    out = tmp_path / "replayed.html"
    assert run_cli("report", path, "-o", out).code == 0
    html = out.read_text()
    shown = unescape(re.search(r'<dd id="provenance-replay">([^<]*)</dd>', html).group(1))
    check = (
        f"consistency check: the coupled replay differs from the measured steps by "
        f"{result['error_mean_pct']:.2f}% mean, {result['error_max_pct']:.2f}% max"
    )
    assert shown.startswith(f"{Path(result['store']).name} replayed under asap (") and check in shown


def test_each_section_says_the_question_its_numbers_answer(report):
    """One story across faces (issue 26): the advice's offline table and the replay answer "these
    batches as they arrived", the sweep "the paper's scenario"; findings by name, never by code."""
    advice = unescape(_section(report, "advice"))
    assert "The question: these batches as they arrived" in advice
    headers, rows = _table(report, "table-advice")
    assert headers[:3] == ["#", "what-if", "offline recovered (s)"] and "answers" in headers
    answers = [r[headers.index("answers")] for r in rows]
    assert not any("_" in a for a in answers) and any("barrier wait" in a for a in answers)
    assert "The question: these batches as they arrived" in unescape(_section(report, "replay-1"))
    assert "The question: the paper's scenario." in unescape(_section(report, "sweep"))
