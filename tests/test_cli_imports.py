"""`asaptrace ingest` imports only what ingesting needs, so the command starts fast.

Checked in a fresh interpreter (this test process has imported everything already) that runs the
ingest command on a small trace and then lists the modules it loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests._kineto_helpers import gpu_process, kernel, write_trace

#: Modules the ingest command never needs (imported by `analyze`, `replay`, `synth`, faces, Ray).
NOT_ON_THE_INGEST_PATH = (
    "asaptrace.analyze.diagnosis",
    "asaptrace.analyze.barrier",
    "asaptrace.synth",
    "asaptrace.replay",
    "asaptrace.viz",
    "plotly",
    "dash",
    "ray",
    "rich.progress",  # the progress bar is drawn (and imported) only on a terminal
)

_RUN = """
import json, sys
from asaptrace.cli import main
sys.argv = ["asaptrace", "ingest", sys.argv[1], "-o", sys.argv[2]]
try:
    main()
except SystemExit as e:
    assert not e.code, e.code
print(json.dumps(sorted(sys.modules)))
"""


def test_the_ingest_command_loads_no_analysis_face_or_ray(tmp_path):
    trace = tmp_path / "rank0.json"
    write_trace(trace, [*gpu_process(0), kernel("flash_fwd", 100, 10, pid=0, corr=1)], rank=0)
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(trace), str(tmp_path / "s")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert "asaptrace.pipeline" in loaded and (tmp_path / "s" / "meta.json").is_file()  # it did ingest
    assert sorted(m for m in NOT_ON_THE_INGEST_PATH if m in loaded) == []
