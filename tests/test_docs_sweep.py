"""docs/reference/sweep-json.md lists exactly the keys a sweep writes; docs/sweep.md every knob."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from asaptrace.replay.serving.scenario import knob_names, load_scenario
from asaptrace.replay.whatif.sensitivity import sweep_with_sensitivity
from asaptrace.replay.whatif.sweep import SweepOptions

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _sections(text: str, header: str) -> dict[str, set[str]]:
    """## heading → the keys in the first column of its tables (a, b-style cells split; the
    header row, whose first cell is ``header``, skipped)."""
    out: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = out.setdefault(line[3:].strip(), set())
        elif current is not None and (m := re.match(r"^\| ([\w, ]+) \|", line)) and m.group(1) != header:
            current.update(k.strip() for k in m.group(1).split(","))
    return out


@pytest.fixture(scope="module")
def result():
    sc = load_scenario("asap-paper").with_knobs({"duration_s": 20})
    opt = SweepOptions(rates=(1, 4, 16), bisection_steps=1)
    return sweep_with_sensitivity(sc, opt, vary_specs=["k_s=1,2"])


def test_every_key_of_the_result_is_documented(result):
    doc = _sections((DOCS / "reference" / "sweep-json.md").read_text(), "key")
    assert doc["Top level"] == set(result)
    assert doc["A curve point (`curves[policy][i]`)"] == set(result["curves"]["asap"][0])
    assert doc["A decomposition row (`decomposition[i]`)"] == set(result["decomposition"][0])
    vary_tornado = doc["A vary row (`vary[i]`) and a tornado row (`tornado[i]`)"]
    assert vary_tornado == set(result["vary"][0]) | set(result["tornado"][0])


def test_every_knob_is_in_the_knob_table():
    doc = _sections((DOCS / "sweep.md").read_text(), "knob")
    assert doc["Knobs (`scenarios/asap-paper.toml`)"] == set(knob_names())
