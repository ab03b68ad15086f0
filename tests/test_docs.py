"""Docs are part of the build: the CLI reference matches --help, and every command is documented."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import typer

from asaptrace.cli import app

ROOT = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_reference", ROOT / "docs" / "gen_cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_up_to_date():
    committed = (ROOT / "docs" / "cli-reference.md").read_text()
    assert committed == _generator().render(), "run: python docs/gen_cli_reference.py"


def test_every_command_has_an_example_and_is_in_the_readme():
    group = typer.main.get_command(app)
    ctx = group.context_class(group, info_name="asaptrace")
    readme = (ROOT / "README.md").read_text()
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert "Example:" in (cmd.help or ""), f"`asaptrace {name}` --help has no example"
        assert f"asaptrace {name}" in readme, f"README does not mention `asaptrace {name}`"
