"""No two modules of asaptrace import each other in a circle (directly or through others).

The layers contract of import-linter (pyproject.toml) orders the packages; this checks the modules
*inside* a package too, where a circle (a registry importing its plug-ins that import the registry)
would otherwise go unseen. grimp is import-linter's own import graph. Package ``__init__`` modules
are left out: importing ``asaptrace.x.y`` loads its packages first by Python's rules, and
``asaptrace/__init__.py`` is the lazy public API, which names everything.
"""

from __future__ import annotations

import importlib.util

import grimp


def _is_package(module: str) -> bool:
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.submodule_search_locations is not None


def test_no_module_of_asaptrace_imports_itself_through_others():
    graph = grimp.build_graph("asaptrace")
    modules = sorted(m for m in graph.modules if not _is_package(m))
    circles = []
    for module in modules:
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if _is_package(imported):
                continue
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back and not any(_is_package(m) for m in back):
                circles.append(" -> ".join((module, *back)))
    assert circles == []
