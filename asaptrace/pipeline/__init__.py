"""The one place that composes the layers: ingest → enrich → store → diagnose; store → replay →
store; the serving sweep; report, export and compare.

Every face (the CLI, a notebook, the report, the dashboard and the exporter) calls these; the layers
below stay pure (``enrich`` maps frames to frames, ``analyze.diagnosis.diagnose`` maps tables to a
Diagnosis, ``replay`` maps a workload to a result) and never import one another upwards. Importing
the package is cheap: each room imports its layers inside the calls that need them (``asaptrace
ingest`` starts reading files before numpy, pyarrow and polars are imported).

Its modules, in data-flow order:

* ``store`` — ingest → enrich → store (written once), open, read, diagnose, analyze;
* ``cache`` — a store's diagnosis kept beside its tables and read back while it is still true;
* ``whatif`` — store → replay → store, the serving sweep, the advice, the policy catalogue;
* ``critical`` — store → the critical path of each step across ranks;
* ``faces`` — the report, the Perfetto export, the comparison of two runs, the timeline's spans.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from asaptrace.ingest.source import DEFAULT_MAX_DECOMPRESSED
from asaptrace.memory import DEFAULT_BUDGET
from asaptrace.pipeline.critical import critical_store
from asaptrace.pipeline.faces import (
    REPORT_SUFFIXES,
    comparability_of,
    compare_diagnoses,
    compare_stores,
    export_store,
    gate_thresholds,
    gate_verdicts,
    report_format,
    report_store,
    timeline_of,
)
from asaptrace.pipeline.store import (
    TABLES,
    analyze_store,
    build_store,
    diagnose_store,
    enrich_store,
    open_store,
    read_ahead,
    read_tables,
    store_info,
    write_tables_csv,
)
from asaptrace.pipeline.whatif import (
    advise_store,
    policy_catalogue,
    replay_refusal,
    replay_store,
    sweep,
    validate_stores,
)

if TYPE_CHECKING:
    from asaptrace.synth import load_config as synth_config
    from asaptrace.synth import presets as synth_presets
    from asaptrace.synth import synthesize

__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_MAX_DECOMPRESSED",
    "REPORT_SUFFIXES",
    "TABLES",
    "advise_store",
    "analyze_store",
    "build_store",
    "comparability_of",
    "compare_diagnoses",
    "compare_stores",
    "critical_store",
    "diagnose_store",
    "enrich_store",
    "export_store",
    "gate_thresholds",
    "gate_verdicts",
    "open_store",
    "policy_catalogue",
    "read_ahead",
    "read_tables",
    "replay_refusal",
    "replay_store",
    "report_format",
    "report_store",
    "store_info",
    "sweep",
    "synth_config",
    "synth_presets",
    "synthesize",
    "timeline_of",
    "validate_stores",
    "write_tables_csv",
]

#: A layer's own function a face calls as it is, imported on first use (:func:`__getattr__`)
FORWARDED = {
    "synth_presets": ("asaptrace.synth", "presets"),  # name → what the preset simulates
    "synth_config": ("asaptrace.synth", "load_config"),  # a preset + a TOML + overrides
    "synthesize": ("asaptrace.synth", "synthesize"),  # a synthetic run's traces and truth.json
}


def __getattr__(name: str) -> Any:
    """The names of :data:`FORWARDED`, imported on first use: importing this package stays cheap."""
    if name in FORWARDED:
        module, attr = FORWARDED[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
