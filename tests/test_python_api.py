"""The worked example of docs/reference/python-api.md runs as written, on the bundled sample run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reference" / "python-api.md"
SAMPLE = ROOT / "sample_traces" / "coupled"


def _example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 1, "the page has one worked example"
    return blocks[0]


@pytest.mark.skipif(not (SAMPLE / "kineto").is_dir(), reason="sample_traces/coupled is not in this checkout")
def test_worked_example_runs_and_says_what_the_sample_is(tmp_path):
    code = _example().replace('"out/coupled.store"', repr(str(tmp_path / "coupled.store")))
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)  # run from the repository root, as the page says
    truth = json.loads((SAMPLE / "truth.json").read_text())
    # the sample is DP8×TP4 / EP32: 32 ranks, one row per rank in the truth
    assert namespace["info"]["n_ranks"] == len(truth["ranks"]) == 32
    # eight DP groups, each with a mean barrier wait
    assert namespace["by_group"].height == 8
    # rank 0 runs attention and MoE kernels: both show up in its device time per kind
    kinds = set(namespace["per_kind"].get_column("kind").to_list())
    assert {"attention", "moe"} <= kinds
    assert namespace["diag"].findings, "the coupled sample has barrier-wait findings"


def test_import_asaptrace_stays_cheap():
    # a fresh interpreter: importing the package must not pull in polars (the names are lazy)
    code = "import sys, asaptrace; print('polars' in sys.modules, callable(asaptrace.build_store))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_every_lazy_export_resolves():
    import asaptrace

    assert sorted(asaptrace.__all__) == sorted(["__version__", *asaptrace._EXPORTS])
    for name in asaptrace._EXPORTS:
        assert not isinstance(getattr(asaptrace, name), type(asaptrace)), f"{name} resolves to a module"


def test_the_pipeline_package_stays_cheap_and_every_public_name_resolves():
    """``asaptrace.pipeline`` is a package of rooms (store, whatif, faces); a face imports every name
    from the package itself, so each of its ``__all__`` must resolve there — to a function or a
    constant, never to a room — and importing it (what the CLI does at start-up) pulls in no numpy,
    pyarrow or polars."""
    code = (
        "import sys, asaptrace.pipeline as p; "
        "print([m for m in ('numpy', 'polars', 'pyarrow') if m in sys.modules]); "
        "print([n for n in p.__all__ if isinstance(getattr(p, n), type(p))])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "[]"]
    from asaptrace.pipeline import build_store, report_store, sweep  # one name from each room

    assert {f.__module__ for f in (build_store, sweep, report_store)} == {
        "asaptrace.pipeline.store",
        "asaptrace.pipeline.whatif",
        "asaptrace.pipeline.faces",
    }
