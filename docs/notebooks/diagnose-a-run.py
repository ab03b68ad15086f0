# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Diagnose a run: from a folder of traces to the advice
#
# This notebook walks the bundled coupled sample (32 ranks, DP8×TP4 attention + EP32 experts on the
# same devices, 2 prefill steps of DeepSeek-V3-class MoE) from its per-rank Kineto traces to what
# to change. Every result shows itself as the same tables the CLI and the report show; figures are
# plain plotly figures. Run it with `jupyter lab` (or `jupytext --to notebook` first); CI runs it
# headless (tests/test_notebook.py).

# %%
import os
import tempfile
from pathlib import Path

import asaptrace
from asaptrace import pipeline


def find_samples() -> Path:
    """The bundled samples from any working directory: $ASAPTRACE_SAMPLES, else the nearest
    sample_traces/ above the working directory, else the one beside the asaptrace package (a checkout)."""
    if os.environ.get("ASAPTRACE_SAMPLES"):
        return Path(os.environ["ASAPTRACE_SAMPLES"])
    for start in (Path.cwd(), Path(asaptrace.__file__).resolve().parent):
        for folder in (start, *start.parents):
            if (folder / "sample_traces" / "coupled" / "kineto").is_dir():
                return folder / "sample_traces"
    raise FileNotFoundError(
        "sample_traces/ not found: set ASAPTRACE_SAMPLES to the repository's sample_traces"
    )


TRACES = find_samples() / "coupled" / "kineto"
work = Path(tempfile.mkdtemp(prefix="asaptrace-notebook-"))

# %% [markdown]
# ## 1. Ingest the folder of rank files into a store
# One Parquet store, enriched (taxonomy, topology, step/layer segmentation, clock alignment).

# %%
store = asaptrace.build_store([TRACES], work / "coupled.store")
info = asaptrace.store_info(store)
print(f"{info['n_ranks']} ranks, {info['n_events']:,} events, every event kept or counted rejected")

# %% [markdown]
# ## 2. The diagnosis: where the prefill time goes
# The findings in plain words, then the key tables (barrier wait by DP group, Σs² imbalance per step,
# stragglers, overlap).

# %%
diag = asaptrace.diagnose_store(store)
diag

# %% [markdown]
# ## 3. The worst barrier on the device timeline
# The step and layers where the summed barrier wait is largest, every rank a row: the compute that
# ran and the wait in front of each dispatch/combine.

# %%
from asaptrace.viz.timeline import timeline_figure, worst_window

step, layers = worst_window(diag.tables["barrier_by_rank_layer"], diag.tables["step_breakdown"])
spans = pipeline.timeline_of(store, diag, step=step, layers=layers)
timeline_figure(spans, title=f"step {step}, layers {layers[0]}–{layers[1]}")

# %% [markdown]
# ## 4. The what-if: the same batches under ASAP
# Replayed at ASAP's default split of the same 32 devices, with the recovered time by cause, the cost
# fit per part and the band from its residuals.

# %%
replay = asaptrace.replay_store(store.path, "asap")
replay

# %% [markdown]
# ## 5. The advice: every finding with the what-if that answers it
# Each candidate at its best setting, ranked by the time it wins back, with its range over what the
# store cannot pin and the cost fit it rests on.

# %%
advice = asaptrace.advise_store(store.path)
advice

# %%
for line in advice.lines():
    print("-", line)
