"""Plotly figure builders, one function per figure: analysis tables in, ``go.Figure`` out (docs/viz.md).

``theme`` (colours per kind, template, time units), ``timeline`` (device Gantt with the wait band),
``barrier`` (wait heatmap, imposed-wait ranking), ``imbalance`` (attention vs Σs², ratios),
``breakdown`` (per-DP-group bars, overlap per device), ``replay`` (measured vs replayed, the
recovered-time waterfall), ``sweep`` (rate → TTFT curves, the tornado), ``advice`` (the advice at a glance). Shared by the report and the dashboard.
"""
