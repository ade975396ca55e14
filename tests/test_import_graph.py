"""Imports run one way: no cycle among the package's module-level imports.

Walks every module of django_bloom with ``ast``: every import is an edge, lazy
ones inside functions included (only ``TYPE_CHECKING`` blocks are left out),
and fails with the cycle it finds."""

import ast
from pathlib import Path

import django_bloom

PACKAGE = Path(django_bloom.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.Module):
    """Every import of a module, in functions too (a lazy import closes a cycle just the
    same when it runs), except under ``TYPE_CHECKING`` (never runs)."""
    typing_only = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in typing_only:
            yield node


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in imports_of(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                # importing a.b.c runs a and a.b first
                parts = target.split(".")
                for i in range(1, len(parts) + 1):
                    candidate = ".".join(parts[:i])
                    if candidate in modules and candidate != name:
                        graph[name].add(candidate)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            # a package's __init__ runs before its submodules: not a cycle by itself
            if node.startswith(nxt + "."):
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert "django_bloom.engine.storage" in graph and len(graph) > 30
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_engine_imports_nothing_above_it():
    """The engine (hashing, layouts, storage, wire protocol) never imports the public
    API, the features, models or the admin."""
    allowed = ("django_bloom.engine", "django_bloom.conf", "django_bloom.exceptions")
    for name, targets in import_graph().items():
        if name.startswith("django_bloom.engine"):
            above = {t for t in targets if t != "django_bloom" and not t.startswith(allowed)}
            assert not above, f"{name} imports {above}"


def test_the_netset_parser_is_pure():
    graph = import_graph()
    assert not {t for t in graph["django_bloom.ipblock.netset"] if t != "django_bloom"} - {
        "django_bloom.ipblock",
        "django_bloom.ipblock.ip",
    }


def test_settings_and_exceptions_import_nothing_of_the_package():
    """conf.py's setting_changed handler no longer reaches up (each cache registers its own)."""
    graph = import_graph()
    assert graph["django_bloom.conf"] == set()
    assert graph["django_bloom.exceptions"] == set()
