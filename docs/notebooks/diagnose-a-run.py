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
import tempfile
from pathlib import Path

import asaptrace
from asaptrace import pipeline

ROOT = Path.cwd()
while not (ROOT / "sample_traces").is_dir() and ROOT.parent != ROOT:  # run from the repo or docs/
    ROOT = ROOT.parent
TRACES = ROOT / "sample_traces" / "coupled" / "kineto"
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
