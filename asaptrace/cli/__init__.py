"""The ``asaptrace`` command (console script ``asaptrace = "asaptrace.cli:main"``).

Each command parses, makes one :mod:`asaptrace.pipeline` call and formats. Modules: ``app`` (the
typer app, one module per command registered; ``__main__`` for ``python -m``); one per command, in
the order of a session: ``ingest``, ``info``, ``analyze``, ``critical``, ``report``, ``export``,
``compare``, ``replay``, ``validate``, ``policies``, ``sweep``, ``advise``, ``synth``, ``dashboard``;
shared by them:
``_common`` (the user-error edge, options, output), ``_layout`` (fitting a terminal's width: the one
way to draw a table, answer tables of ``advise`` and ``sweep`` included).
"""

from asaptrace.cli.app import app, main

__all__ = ["app", "main"]
