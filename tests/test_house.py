"""The house rules a newcomer relies on to find their way (DESIGN.md, "Decisions already taken").

* no module imports another package's underscore (private) module: a package's private modules
  are its own business, so it may change them without breaking anyone;
* every package's docstring names each of its modules, so the docstring is the package's map;
* no module over 500 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The folders scanned → the name each installs under (pyproject.toml's ``package-dir``: the
#: ``dashboards/`` folder is the ``asaptrace_dashboards`` package).
INSTALLED_AS = {"asaptrace": "asaptrace", "dashboards": "asaptrace_dashboards"}
SCANNED = tuple(INSTALLED_AS)
MAX_LINES = 500


def _dotted(parts: tuple[str, ...]) -> str:
    """A path's parts as the installed module name."""
    return ".".join((INSTALLED_AS.get(parts[0], parts[0]), *parts[1:]))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return _dotted(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(path: Path) -> str:
    """The package a file belongs to (a package's ``__init__`` belongs to that package)."""
    return _dotted(path.relative_to(ROOT).parent.parts)


def _is_module(dotted: str) -> bool:
    top, *rest = dotted.split(".")
    folder = {name: f for f, name in INSTALLED_AS.items()}.get(top, top)
    base = ROOT.joinpath(folder, *rest)
    return base.with_suffix(".py").exists() or base.is_dir() or any(base.parent.glob(base.name + ".*.so"))


def _imported_modules(path: Path, package: str) -> list[tuple[int, str]]:
    """Every module a file imports by name (``import a.b``, ``from a.b import c`` with c a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names if _is_module(f"{base}.{a.name}")]
    return found


def _sources() -> list[Path]:
    return sorted(p for top in SCANNED for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts)


def _private_module(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in dotted.split("."))


def _offenders(path: Path, here: str) -> list[str]:
    """The underscore modules of other packages that a file (in package ``here``) imports."""
    found = []
    for line, dotted in _imported_modules(path, here):
        if not dotted.startswith(tuple(INSTALLED_AS.values())) or not _private_module(dotted):
            continue
        # the package holding the first underscore part is the only one that may import it
        parts = dotted.split(".")
        first = next(i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__"))
        owner = ".".join(parts[:first])
        if here != owner and not here.startswith(owner + "."):  # its sub-packages are inside it
            found.append(f"{path.name}:{line} imports {dotted} (private to {owner})")
    return found


def test_no_cross_package_underscore_import():
    offenders = [o for path in _sources() for o in _offenders(path, _package_of(path))]
    assert offenders == []


def test_the_rule_sees_both_import_forms_and_allows_the_owner(tmp_path):
    """The scan above must catch a cross-package import in either form (else it passes on anything),
    and let a package import its own private module (the kernel dispatch imports ``_pkernel``)."""
    fake = tmp_path / "fake.py"
    fake.write_text(
        "from asaptrace.replay.mechanics._pkernel import run\n"
        "import asaptrace.replay.mechanics._pkernel\n"
        "from asaptrace.replay.mechanics import _pkernel\n"
    )
    assert len(_offenders(fake, "asaptrace.replay.whatif")) == 3
    assert _offenders(fake, "asaptrace.replay.mechanics") == []
    assert _offenders(fake, "asaptrace.replay.mechanics.sub") == []


# --------------------------------------------------------------------------- package docstrings
# Every package under asaptrace/ and dashboards/ (the replay's rooms, views, pipeline, ingest's formats, ...).
PACKAGES_WITH_A_MAP = SCANNED


def _packages() -> list[Path]:
    return sorted(init.parent for top in PACKAGES_WITH_A_MAP for init in (ROOT / top).rglob("__init__.py"))


def test_every_package_docstring_names_each_of_its_modules():
    missing = []
    for pkg in _packages():
        doc = ast.get_docstring(ast.parse((pkg / "__init__.py").read_text())) or ""
        dotted = _module_name(pkg / "__init__.py")
        members = [p.stem for p in pkg.glob("*.py") if p.stem != "__init__"]
        members += [p.name for p in pkg.iterdir() if (p / "__init__.py").exists()]
        members += [p.name.split(".")[0] for p in pkg.glob("*.c")]
        for name in sorted(set(members)):
            if f"{dotted}.{name}" not in doc and f"``{name}" not in doc:
                missing.append(f"{dotted}: {name}")
    assert missing == []


# --------------------------------------------------------------------------------- module size
SIZE_CHECKED = SCANNED


def test_no_module_over_500_lines():
    long = [
        f"{p.relative_to(ROOT)}: {n} lines"
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    ]
    assert long == []
