"""The CLI path imports only what a command needs, so `asaptrace ingest` starts fast.

Checked in a fresh interpreter (this test process has imported everything already): after
`import asaptrace.cli`, none of the heavy faces or analyses are loaded; `import asaptrace` alone
loads no third-party package at all.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Modules the ingest command never needs (imported by `analyze`, `synth`, reports and dashboards).
NOT_ON_THE_CLI_PATH = (
    "asaptrace.analyze.diagnosis",
    "asaptrace.analyze.barrier",
    "asaptrace.synth",
    "asaptrace.viz",
    "plotly",
    "dash",
    "ray",
)


def _loaded_after(statement: str) -> set[str]:
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


def test_importing_the_cli_loads_no_analysis_face_or_ray():
    loaded = _loaded_after("import asaptrace.cli")
    assert "asaptrace.enrich.pipeline" in loaded  # ingest itself is there (the check can fail)
    assert sorted(m for m in NOT_ON_THE_CLI_PATH if m in loaded) == []


def test_import_asaptrace_loads_no_third_party_package():
    loaded = _loaded_after("import asaptrace")
    assert {"polars", "pyarrow", "numpy", "typer", "rich"} & loaded == set()
