"""``advise`` and ``sweep`` read at any terminal width (issue 26: one story across faces).

At 80 columns the advice table gives each what-if its short name, its offline and online columns
side by side, and names every what-if in full in a legend below; at 160 every column is there. At
both: no cell cut with "…", no line wider than the terminal, every what-if named in full, each
online number beside its bound and its range over seeds, each face's question said. The online
advice of the coupled sample is computed once (≈ 30 s) and handed to the CLI, which only formats.
"""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from asaptrace.advise.candidates import candidates
from asaptrace.cli import app
from asaptrace.views.advice import advice_view, disagrees
from asaptrace.views.sweep import BINDING_SHORT
from asaptrace.views.table import ONLINE_QUESTION, PAPER_QUESTION, REPLAY_QUESTION


@pytest.fixture(scope="module")
def online_advice(coupled_store):
    from asaptrace.pipeline import advise_store

    return advise_store(coupled_store.path, online=True)


def _run(args: list[str], columns: int, monkeypatch=None, advice=None) -> str:
    if advice is not None:
        import asaptrace.pipeline

        monkeypatch.setattr(asaptrace.pipeline, "advise_store", lambda *a, **k: advice)
    r = CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    return r.stdout


def _fits(text: str, columns: int) -> None:
    assert "…" not in text  # no cell cut
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= columns, max(lines, key=len)


@pytest.mark.parametrize("columns", [80, 160])
def test_advise_online_reads_at_80_and_160_columns(online_advice, coupled_store, monkeypatch, columns):
    text = _run(["advise", str(coupled_store.path), "--online"], columns, monkeypatch, online_advice)
    _fits(text, columns)
    flat = " ".join(text.split())  # a label may wrap between words inside its cell or line
    j = online_advice.to_json()
    ran = [w for w in j["whatifs"] if w["applies"]]
    assert len(ran) == len(candidates())  # every candidate of the registry applies to the sample
    for w in ran:
        assert w["label"] in flat  # every what-if named in full
        o = w["online"]
        # its online number beside its range over seeds and its bound (binding resource by letter)
        row = next(
            line
            for line in text.splitlines()
            if f" {o['slo_rps']:.2f} " in line and f"{o['range'][0]:.2f}–" in line
        )
        assert f"{o['range'][0]:.2f}–{o['range'][1]:.2f}" in row
        assert f"{o['bound_rps']:.2f} {BINDING_SHORT[o['binding']]}" in row
    # the measured policy's own number, with its range and bound, as every other online number
    on = j["online"]
    lo, hi = on["slo_range"]["coupled"]
    cap = on["capacity"]["coupled"]
    assert (
        f"measured policy coupled: {on['slo_rps']['coupled']:.2f} requests/s (seeds {lo:.2f}–{hi:.2f};"
        f" bound {cap['bound_rps']:.2f}, the {cap['binding']})" in flat
    )
    # each face's question, and the internal finding codes never shown
    assert REPLAY_QUESTION in flat and ONLINE_QUESTION in flat
    assert "sumsq_imbalance" not in text and "barrier_wait" not in text
    # numbered lines wrap to the terminal, continuation lines indented under their number
    assert any(line.startswith("1. ") for line in text.splitlines())
    if columns == 80:
        for w in ran:  # the short name, whole, in the table; the full one in the legend
            assert any(line.split()[1:2] == [w["name"]] for line in text.splitlines() if line[:1].isdigit())
            assert f"{w['name']}: {w['label']}" in text
    else:  # complete: the findings it answers, the fit, the offline range
        for header in ("answers", "weak fit", "low (s)", "high (s)", "agree"):
            assert header in flat


def test_the_table_says_where_offline_and_online_disagree_as_the_line_does(online_advice):
    # the coupled sample: asap loses 523 ms offline yet serves 1.9× coupled online; afd-pingpong
    # wins 852 ms offline yet serves half of coupled's rate: both disagree, and say why
    j = online_advice.to_json()
    for width in (None, 80):
        view = advice_view(j, width=width)
        agree = dict(zip(view.rows["whatif"], view.rows["agree"], strict=True))
        for w in (w for w in j["whatifs"] if w["applies"]):
            key = w["label"] if width is None else w["name"]
            said = "offline and online disagree" in w["line"]
            assert (agree[key] == "no") == said == bool(disagrees(w)), w["name"]
    by = {w["name"]: w for w in j["whatifs"]}
    assert by["asap"]["recovered_ns"] < 0 and by["asap"]["online"]["ratio"] > 1 and disagrees(by["asap"])


@pytest.mark.parametrize("columns", [80, 160])
def test_sweep_reads_at_80_and_160_columns(columns):
    args = ["sweep", "--duration", "20s", "--rates", "1,4,16", "--jobs", "1", "--seeds", "2"]
    text = _run(args, columns)
    _fits(text, columns)
    flat = " ".join(text.split())
    assert f"— {PAPER_QUESTION}" in flat  # the question the sweep answers
    assert "seeds" in flat and "bound" in flat and "min–max over 2 seeds" in flat
    if columns == 80:  # the two TTFT-at-1/s columns said in words instead
        assert "mean TTFT at 1 request/s: coupled" in flat and "mean TTFT @1/s" not in flat
    else:
        assert "mean TTFT @1/s" in flat


def test_a_terminal_too_narrow_for_any_table_gets_one_block_per_row(
    online_advice, coupled_store, monkeypatch
):
    text = _run(["advise", str(coupled_store.path), "--online"], 40, monkeypatch, online_advice)
    _fits(text, 40)
    # one block per what-if, headed by its rank and name alone on a line (the rank follows the advice)
    assert any(re.fullmatch(r"\d\. asap-expert-failure", line) for line in text.splitlines())
    assert "    online RPS: " in text
