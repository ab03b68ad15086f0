"""docs/notebooks/diagnose-a-run.py, executed headless as a user's Jupyter would (nbclient, a real
kernel): no error cell, and it shows the findings, a figure and the replay table; the results'
notebook HTML is the faces' tables, escaped."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "notebooks" / "diagnose-a-run.py"


def test_the_notebook_runs_and_shows_findings_a_figure_and_the_replay(tmp_path, monkeypatch):
    jupytext = pytest.importorskip("jupytext", reason="the notebook extra is not installed")
    nbclient = pytest.importorskip("nbclient", reason="the notebook extra is not installed")
    nb = jupytext.read(NOTEBOOK)
    # run from a working directory with no sample_traces/ above it (as `jupytext --execute` from
    # elsewhere does): the notebook finds the samples beside the asaptrace it imports, this checkout's
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("ASAPTRACE_SAMPLES", raising=False)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()  # raises CellExecutionError on any error cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "Findings" in html or "finding" in html.lower()  # the diagnosis' findings table
    assert "Replay: asap" in html and "makespan" in html.lower()  # the replay's tables
    assert "Advice for" in html and "wins back" in html
    assert any("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs)  # a figure


def test_results_show_escaped_tables_in_a_notebook(coupled_store):
    import asaptrace.notebook  # noqa: F401  (what `import asaptrace` does under IPython)
    from asaptrace.pipeline import diagnose_store

    diag = diagnose_store(coupled_store)
    diag.meta["store"] = "<script>alert(1)</script>"
    html = diag._repr_html_()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html
    assert "<table>" in html and repr(diag).startswith("<Diagnosis ") and "\n" not in repr(diag)
