"""Render docs/notebooks/*.py (jupytext percent format) as executed .ipynb beside them.

Run: python docs/notebooks/render.py — GitHub shows the .ipynb with its tables; plotly figures
are kept as their JSON (drawn by Jupyter, not by GitHub's static view).
"""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbclient
import nbformat

HERE = Path(__file__).resolve().parent


def render(src: Path) -> Path:
    nb = jupytext.read(src)
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(HERE.parents[1])}}
    ).execute()
    out = src.with_suffix(".ipynb")
    nbformat.write(nb, out)
    return out


if __name__ == "__main__":
    for src in sorted(HERE.glob("*.py")):
        if src.name != Path(__file__).name:
            print("wrote", render(src))
