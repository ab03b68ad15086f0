"""Run the CLI in-process and capture what a user would see."""

from __future__ import annotations

from dataclasses import dataclass

from typer.testing import CliRunner

from asaptrace.cli import app


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """stdout with its white space folded: a sentence as the user reads it, whatever the
        terminal's width wrapped it to."""
        return " ".join(self.stdout.split())


def run_cli(*args: str) -> Run:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Run(result.exit_code, result.stdout, result.stderr)
