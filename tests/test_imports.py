"""The project's import graph: no cycle among its modules, no private name imported across them.

Read from the source with ``ast`` (nothing is imported), so a cycle that only an import order would
reveal is found too. Edges are the modules a module names in ``import`` / ``from ... import``
(including imports inside functions: a deferred import that closes a cycle is still a cycle)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("datamodules", "rankers", "losses", "metrics", "retrieval", "kernels", "experiments", "bench")


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the project's packages and ``train.py``."""
    modules = {"train": root / "train.py"} if (root / "train.py").exists() else {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _owner(name: str | None, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a project module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _source_of(module: str, node: ast.ImportFrom, modules: dict[str, Path]) -> str | None:
    if not node.level:
        return node.module
    base = module.split(".")
    if modules[module].name != "__init__.py":
        base = base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_graph(modules: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """Each module's project imports, and the private names (``_x``) imported from another module."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    private = []
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                graph[module].update(t for a in node.names if (t := _owner(a.name, modules)) not in (None, module))
            elif isinstance(node, ast.ImportFrom) and (source := _source_of(module, node, modules)):
                for alias in node.names:
                    target = _owner(f"{source}.{alias.name}", modules)
                    if target is None or target == module:
                        continue
                    graph[module].add(target)
                    if (
                        alias.name.startswith("_")
                        and not alias.name.startswith("__")
                        and target == _owner(source, modules)
                    ):
                        private.append(f"{module} imports {alias.name} from {target}")
    return graph, private


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_among_the_projects_modules():
    graph, _ = import_graph(project_modules())
    assert cycles(graph) == []


def test_no_private_name_is_imported_across_modules():
    _, private = import_graph(project_modules())
    assert private == []


def test_the_checks_see_a_cycle_and_a_private_import(tmp_path):
    package = tmp_path / "rankers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from rankers.b import _helper\n")
    (package / "b.py").write_text("def f():\n    from . import a\n\n\ndef _helper():\n    pass\n")
    (package / "c.py").write_text("import rankers.a\n")
    graph, private = import_graph(project_modules(tmp_path))
    assert cycles(graph) == [["rankers.a", "rankers.b"]]
    assert private == ["rankers.a imports _helper from rankers.b"]
