"""What a human sees of each result, and each result as flat tables: one module per result.

Display policy lives here once (which tables, which columns, which rows, in which order), so the CLI,
the report, the dashboard and a notebook show the same things; faces only render a
:class:`~asaptrace.views.table.TableView` and pick no columns themselves. Every table stays whole in
``--json`` / ``--csv`` / the Python API.

Modules:

- :mod:`~asaptrace.views.table`: the one :class:`TableView`, rows a terminal shows, narrow layouts,
  wrapping, the question each face's numbers answer.
- :mod:`~asaptrace.views.validate`: ``asaptrace validate``'s sentences and per step / per layer tables.
- :mod:`~asaptrace.views.diagnosis`: the key tables of a diagnosis, its header and findings.
- :mod:`~asaptrace.views.barriers`: one barrier: collective instances, arrival order, its window.
- :mod:`~asaptrace.views.store`: what a store holds (``info``, ``ingest``) and the policy catalogue.
- :mod:`~asaptrace.views.replay`: a replay's views and its flat tables.
- :mod:`~asaptrace.views.compare`: two stores side by side, and as flat tables.
- :mod:`~asaptrace.views.sweep`: an online sweep's views and its flat tables.
- :mod:`~asaptrace.views.critical`: the critical path's tables and its ``--json``.
- :mod:`~asaptrace.views.advice`: the advice's views, legend, lines and its flat tables.
- :mod:`~asaptrace.views.files`: writing any result's flat tables as CSV / Parquet, all or nothing.
"""
