"""asaptrace: where MoE prefill time goes, and how much an asynchronous disaggregated design wins back.

The public calls (documented in docs/reference/python-api.md) are re-exported here lazily, so
``import asaptrace`` stays cheap and a name's module is imported the first time it is used::

    import asaptrace
    store = asaptrace.build_store(["traces/"], "run.store", overwrite=True)
    diag = asaptrace.diagnose_store(store)

Its map, faces on top, each layer importing only those below (docs/layout.md; ``lint-imports``):

* faces: ``cli`` (the command), ``notebook`` (results in Jupyter);
* ``pipeline`` — the one place that composes the layers;
* ``report``, ``viz`` (figures), ``export`` (Perfetto), ``views`` (what a human sees of each result);
* ``synth`` (synthetic traces), ``advise`` (findings joined to what-ifs), ``replay`` (the what-ifs);
* ``analyze`` (the diagnosis); ``enrich``, ``ingest`` (trace formats), ``workload`` (request workloads);
* ``store`` (the Parquet store), ``info`` (what it holds), ``executors`` (where parallel work runs),
  ``chunks`` (a big rank's host rows and flows on disk between its reader and its enrichment);
* leaves: ``schema``, ``errors``, ``registry``, ``accounting``, ``units``, ``userfiles``, ``memory``,
  ``display`` (how a result shows itself in a notebook), ``questions`` (the question each what-if
  answers, in the words every face prints).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name → the module that defines it
_EXPORTS = {
    "build_store": "asaptrace.pipeline",
    "enrich_store": "asaptrace.pipeline",
    "diagnose_store": "asaptrace.pipeline",
    "read_tables": "asaptrace.pipeline",
    "replay_store": "asaptrace.pipeline",
    "advise_store": "asaptrace.pipeline",
    "sweep": "asaptrace.pipeline",
    "store_info": "asaptrace.info",
    "open_store": "asaptrace.store",
    "TraceStore": "asaptrace.store",
    "Diagnosis": "asaptrace.analyze.diagnosis",
    "diagnose": "asaptrace.analyze.diagnosis",
    "enrich_frames": "asaptrace.enrich.frames",
    "IngestOptions": "asaptrace.ingest.base",
    "synthesize": "asaptrace.synth",
    "load_config": "asaptrace.synth",
}

__all__ = [  # noqa: RUF022  (grouped as _EXPORTS)
    "__version__",
    "build_store",
    "enrich_store",
    "diagnose_store",
    "read_tables",
    "replay_store",
    "advise_store",
    "sweep",
    "store_info",
    "open_store",
    "TraceStore",
    "Diagnosis",
    "diagnose",
    "enrich_frames",
    "IngestOptions",
    "synthesize",
    "load_config",
]

if TYPE_CHECKING:
    from asaptrace.analyze.diagnosis import Diagnosis, diagnose
    from asaptrace.enrich.frames import enrich_frames
    from asaptrace.info import store_info
    from asaptrace.ingest.base import IngestOptions
    from asaptrace.pipeline import (
        advise_store,
        build_store,
        diagnose_store,
        enrich_store,
        read_tables,
        replay_store,
        sweep,
    )
    from asaptrace.store import TraceStore, open_store
    from asaptrace.synth import load_config, synthesize


if "IPython" in sys.modules:  # in a notebook every result shows the faces' tables (asaptrace.display)
    importlib.import_module("asaptrace.notebook")


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'asaptrace' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
