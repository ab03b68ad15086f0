"""The ``asaptrace`` command (console script ``asaptrace = "asaptrace.cli:main"``)."""

from asaptrace.cli.app import app, main

__all__ = ["app", "main"]
