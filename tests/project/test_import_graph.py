"""Imports run one way: no cycle among the package's module-level imports.

Walks every module of django_bloom with ``ast``: every import is an edge, lazy
ones inside functions and ``TYPE_CHECKING`` ones included (a type-only import
from above is still a dependency a reader follows), and fails with the cycle
it finds. Also: no module imports another's ``_private`` name, and the layout
protocol stays small."""

import ast
from pathlib import Path

import django_bloom

PACKAGE = Path(django_bloom.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.Module):
    """Every import of a module: in functions too (a lazy import closes a cycle just the
    same when it runs) and under ``TYPE_CHECKING``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
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


def test_no_module_imports_another_modules_private_names():
    found = []
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in imports_of(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("django_bloom"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                private = [name for name in private if not name.startswith("__")]
                found += [f"{module_name(path)}: {node.module}.{name}" for name in private]
    assert found == []


def test_the_layout_protocol_is_small_and_capabilities_are_opt_in():
    """At most 20 public members on the base (Django's BasePasswordHasher has about a
    dozen); what only some kinds do is a capability class, never a flag on the base."""
    from django_bloom.engine.kinds import capabilities, layout_class, layout_names
    from django_bloom.engine.kinds.base import Layout

    public = {n for n in dir(Layout) if not n.startswith("_")} | set(Layout.__annotations__)
    assert len(public) <= 20, sorted(public)
    for flag in ("removable", "supports_mirror", "rebuildable", "cluster_ready", "remove"):
        assert not hasattr(Layout, flag)
    kinds = {name: layout_class(name) for name in layout_names()}
    assert issubclass(kinds["counting"], capabilities.Removable)
    assert not issubclass(kinds["standard"], capabilities.Removable)
    assert not issubclass(kinds["rotating"], capabilities.Rebuildable)
    assert issubclass(kinds["rotating"], capabilities.ExpiringKeys)
    assert not issubclass(kinds["sharded"], capabilities.Mirrorable)


def test_no_module_is_over_400_lines():
    """A module a reader can hold: split by what its parts do, not squeezed."""
    long = {
        str(path.relative_to(PACKAGE)): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts
    }
    assert {name: n for name, n in long.items() if n > 400} == {}
