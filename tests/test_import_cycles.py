"""No import circle in asaptrace, between modules or between packages (directly or through others).

The layers contract of import-linter (pyproject.toml) orders the top-level packages; this checks
inside them too, where a circle would otherwise go unseen, at two grains (grimp is import-linter's
own import graph):

- **modules**, package ``__init__`` modules included (a module importing a name of its own
  package, as ``from asaptrace.ingest.kineto import c_scanner`` does, is a circle only when that
  ``__init__`` imports the module back);
- **packages**: inside each package, its children (a module, or a sub-package with everything
  under it) as single nodes. A sub-package importing a sibling module that imports the sub-package
  back is a circle even when no two *modules* form one: before the read-ahead moved into
  ``ingest/kineto/``, ``ingest.kineto.reader`` imported ``ingest.prefetch``, which imported
  ``ingest.kineto`` (its ``c_scanner``), and ``ingest.kineto``'s ``__init__`` reaches ``reader`` —
  the module test, which saw only ``reader → prefetch → kineto/__init__``, passed it
  (:func:`test_the_package_test_finds_the_old_read_ahead_circle` rebuilds that shape).
"""

from __future__ import annotations

from collections import defaultdict

import grimp


def _module_circles(graph: grimp.ImportGraph) -> list[str]:
    """Every ``a -> ... -> a`` chain between two modules (packages' ``__init__`` included)."""
    circles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported == module:
                continue
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back:
                circles.append(" -> ".join((module, *back)))
    return circles


def _package_circles(graph: grimp.ImportGraph) -> list[str]:
    """Inside each package, the groups of its children (a sub-package counting as one node with
    everything under it) that import one another in a circle (Tarjan's strongly connected parts)."""
    circles = []
    for package in sorted(m for m in graph.modules if graph.find_children(m)):
        prefix = package + "."

        def child(module: str, prefix: str = prefix) -> str:
            return prefix + module[len(prefix) :].split(".")[0]

        edges: dict[str, set[str]] = defaultdict(set)
        for module in graph.modules:
            if not module.startswith(prefix):
                continue
            for imported in graph.find_modules_directly_imported_by(module):
                if imported.startswith(prefix) and child(module) != child(imported):
                    edges[child(module)].add(child(imported))
        circles += [f"{package}: {' <-> '.join(part)}" for part in _strongly_connected(edges)]
    return circles


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The parts of more than one node in which every node reaches every other (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    parts: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                parts.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return parts


def _asaptrace() -> grimp.ImportGraph:
    return grimp.build_graph("asaptrace", exclude_type_checking_imports=True)


def test_no_module_of_asaptrace_imports_itself_through_others():
    assert _module_circles(_asaptrace()) == []


def test_no_package_of_asaptrace_imports_itself_through_others():
    assert _package_circles(_asaptrace()) == []


def test_the_package_test_finds_the_old_read_ahead_circle():
    # The layout before the read-ahead moved (issue 27), as grimp saw it: reader -> prefetch ->
    # kineto's __init__ (a name from the package itself), and no edge from kineto's __init__ to
    # reader (it imports it lazily). No two modules import each other in a circle, so the module
    # test passes it; at the package grain, `ingest.kineto` and `ingest.prefetch` import each other.
    graph = grimp.ImportGraph()
    for m in ("a", "a.ingest", "a.ingest.prefetch", "a.ingest.kineto", "a.ingest.kineto.reader"):
        graph.add_module(m)
    graph.add_import(importer="a.ingest.kineto.reader", imported="a.ingest.prefetch")
    graph.add_import(importer="a.ingest.prefetch", imported="a.ingest.kineto")
    assert _module_circles(graph) == []
    assert _package_circles(graph) == ["a.ingest: a.ingest.kineto <-> a.ingest.prefetch"]
    # the new layout: the read-ahead inside the Kineto package, whose reader imports it
    moved = grimp.ImportGraph()
    for m in ("a", "a.ingest", "a.ingest.kineto", "a.ingest.kineto.prefetch", "a.ingest.kineto.reader"):
        moved.add_module(m)
    moved.add_import(importer="a.ingest.kineto.reader", imported="a.ingest.kineto.prefetch")
    moved.add_import(importer="a.ingest.kineto.prefetch", imported="a.ingest.kineto")
    assert _package_circles(moved) == [] and _module_circles(moved) == []


def test_the_module_test_finds_a_circle_through_a_package_init():
    # a package's __init__ importing b, b importing c, c importing a name from the __init__:
    # a circle the old test (which left every __init__ out) could not see
    graph = grimp.ImportGraph()
    for m in ("a", "a.p", "a.p.b", "a.q"):
        graph.add_module(m)
    graph.add_import(importer="a.p", imported="a.p.b")
    graph.add_import(importer="a.p.b", imported="a.q")
    graph.add_import(importer="a.q", imported="a.p")
    assert _module_circles(graph) == [
        "a.p -> a.p.b -> a.q -> a.p",
        "a.p.b -> a.q -> a.p -> a.p.b",
        "a.q -> a.p -> a.p.b -> a.q",
    ]
