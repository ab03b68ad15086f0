"""The ``asaptrace`` typer app: one module per command group, each parse → one library call → format.

Every command catches user errors at the edge (:func:`asaptrace.cli._common.user_errors`): one line
on stderr, exit 2. Heavy modules are imported inside the commands, so ``--help`` stays fast.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Annotated

import typer

from asaptrace import __version__
from asaptrace.cli._common import err, out, print_message, usage_error_line
from asaptrace.cli.advise import advise
from asaptrace.cli.analyze import analyze
from asaptrace.cli.compare import compare
from asaptrace.cli.critical import critical
from asaptrace.cli.dashboard import dashboard
from asaptrace.cli.export import export
from asaptrace.cli.info import info
from asaptrace.cli.ingest import ingest
from asaptrace.cli.policies import policies
from asaptrace.cli.replay import replay
from asaptrace.cli.report import report
from asaptrace.cli.sweep import sweep
from asaptrace.cli.synth import synth
from asaptrace.cli.validate import validate

app = typer.Typer(
    name="asaptrace",
    help="Where MoE prefill time goes, who waits on whom, and what an asynchronous disaggregated design wins back.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        out.print(f"asaptrace {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """asaptrace: diagnose MoE prefill traces."""


for command in (
    ingest,
    info,
    analyze,
    critical,
    advise,
    replay,
    sweep,
    policies,
    report,
    dashboard,
    export,
    compare,
    validate,
    synth,
):
    app.command()(command)


def main() -> None:
    """The console script: usage errors (bad or missing options) are one line on stderr, exit 2."""
    # numpy's OpenBLAS starts a thread per core when numpy is imported, and each spins for a while
    # waiting for work: ≈ 0.1 s of a core taken from the files read ahead during the imports
    # (asaptrace.ingest.kineto.prefetch). No command has a matrix large enough to want them.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # the click typer runs on (typer ≥ 0.20 vendors its own): the base of its usage errors
    click_error = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    try:
        try:
            code = app(standalone_mode=False, prog_name="asaptrace")
        finally:
            # the process ends here: spare the interpreter's shutdown a cyclic-GC pass over every
            # object numpy, pyarrow and polars made (0.06 s after an ingest of 8 ranks)
            gc.freeze()
    except typer.Abort:
        err.print("interrupted")
        sys.exit(130)
    except click_error as e:  # UsageError, BadParameter, MissingParameter, NoSuchOption, …
        if not e.format_message():  # no arguments at all: the help was the answer
            sys.exit(e.exit_code)
        print_message(err, "", usage_error_line(e))
        sys.exit(e.exit_code)
    sys.exit(code if isinstance(code, int) else 0)
