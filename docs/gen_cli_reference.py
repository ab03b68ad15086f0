"""Generate docs/cli-reference.md from the typer app (run: python docs/gen_cli_reference.py).

tests/test_docs.py fails when the committed file differs from what this prints, so the reference
cannot drift from `--help`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from asaptrace.cli import app

OUT = Path(__file__).resolve().parent / "cli-reference.md"


def _opt_row(p) -> str:  # p: a typer parameter (typer vendors click; its types are private)
    names = ", ".join(f"`{n}`" for n in [*p.opts, *p.secondary_opts])
    ann = p.type_descriptor.annotation
    kind = (
        "flag" if getattr(p, "is_flag", False) else getattr(ann, "__name__", str(ann)).replace("NoneType", "")
    )
    default = p.default if p.default not in (None, (), [], False) and not callable(p.default) else ""
    # as `--help` shows it: rich markup's escape `\[` is a plain `[` to the reader
    help_text = (getattr(p, "help", "") or "").replace("\\[", "[").replace("|", "\\|").replace("\n", " ")
    return f"| {names} | {kind} | {default} | {help_text} |"


def render() -> str:
    group = typer.main.get_command(app)
    assert hasattr(group, "list_commands")
    lines = [
        "# CLI reference",
        "",
        "Generated from the commands' `--help` by `docs/gen_cli_reference.py`; do not edit.",
        "",
    ]
    ctx = group.context_class(group, info_name="asaptrace")
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        sub = cmd.context_class(cmd, info_name=name, parent=ctx)
        lines += [
            f"## asaptrace {name}",
            "",
            "```",
            " ".join(cmd.collect_usage_pieces(sub)).join([f"asaptrace {name} ", ""]),
            "```",
            "",
            (cmd.help or "").strip(),
            "",
        ]
        args = [p for p in cmd.params if p.param_type_name == "argument"]
        opts = [p for p in cmd.params if p.param_type_name == "option" and p.name != "help"]
        for a in args:
            lines.append(f"- argument `{a.name.upper()}`: {(getattr(a, 'help', '') or '').strip()}")
        if args:
            lines.append("")
        if opts:
            lines += ["| option | type | default | meaning |", "|---|---|---|---|", *map(_opt_row, opts), ""]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if OUT.exists() and OUT.read_text() == text else 1)
    OUT.write_text(text)
    print(f"wrote {OUT}")
