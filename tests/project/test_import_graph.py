"""Imports run one way: down the floors of docs/architecture.md, and no cycle.

Walks every module of django_bloom with ``ast``: every import is an edge, lazy
ones inside functions and ``TYPE_CHECKING`` ones included (a type-only import
from above is still a dependency a reader follows). Each module stands on the floor
the architecture page's diagram gives it; an import from a floor above fails, as does
a cycle. Also: no module imports another's ``_private`` name, and the layout
protocol stays small."""

import ast
import re
from pathlib import Path

import django_bloom

PACKAGE = Path(django_bloom.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.Module):
    """Every import of a module: in functions too (a lazy import closes a cycle just the
    same when it runs) and under ``TYPE_CHECKING``."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def package_modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts}


def named_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that the imports of module ``name`` name: for ``import a.b.c``
    and ``from a.b import c``, the longest of ``a.b.c``, ``a.b``, ``a`` that is a module
    of the package (a name kept for a moved module counts as its package)."""
    named: set[str] = set()
    for node in imports_of(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        named.update(f"{base}.{alias.name}" for alias in node.names)
    found = set()
    for target in named:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules its imports run: those named and their packages (importing
    a.b.c runs a and a.b first)."""
    modules = package_modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in named_imports(name, path, modules):
            parts = target.split(".")
            graph[name].update(
                ".".join(parts[:i])
                for i in range(1, len(parts) + 1)
                if ".".join(parts[:i]) != name
            )
    return graph


# -- the floors (docs/architecture.md's diagram) ------------------------------------------
FLOORS = ("engine", "handles", "features", "faces")  # bottom up
BESIDE = ("conf.py", "exceptions.py")  # beside every floor: import nothing of the package


def floor_names() -> dict[str, list[str]]:
    """Floor -> the names its lines of the architecture page's diagram give: folders
    (``admin/``) and modules (``guard.py``). A folder named in a path (``engine/kinds/``)
    is the floor's too."""
    diagram = ARCHITECTURE.read_text().split("```")[1]
    names: dict[str, list[str]] = {floor: [] for floor in FLOORS}
    floor = None
    for line in diagram.splitlines():
        label = re.match(r"^ (\w+) ", line)
        if label and label[1] in names:
            floor = label[1]
        if floor is None or line.strip().startswith("Redis"):
            continue
        for token in re.findall(r"[\w/]+(?:\.py|/)", line):
            names[floor] += [token, token.split("/")[0] + "/"] if "/" in token else [token]
    return names


def floor_of(path: str, names: dict[str, list[str]]) -> str | None:
    """The floor of the module at ``path`` (relative to the package: ``ops/status.py``)."""
    found = {
        floor
        for floor, tokens in names.items()
        for token in tokens
        if path == token or (token.endswith("/") and path.startswith(token))
    }
    assert len(found) <= 1, f"{path} is on several floors: {found}"
    return found.pop() if found else None


def arrows_up(graph: dict[str, set[str]], floors: dict[str, str]) -> list[str]:
    """Each import of a module from a floor above its own."""
    rank = {"beside": -1, **{floor: i for i, floor in enumerate(FLOORS)}}
    return sorted(
        f"{name} ({floors[name]}) imports {target} ({floors[target]})"
        for name, targets in graph.items()
        for target in targets
        if rank[floors[target]] > rank[floors[name]]
    )


def module_floors() -> dict[str, str]:
    names = floor_names()
    out = {}
    for name, path in package_modules().items():
        relative = path.relative_to(PACKAGE).as_posix()
        out[name] = "beside" if relative in BESIDE else floor_of(relative, names)
    return out


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


def test_every_module_stands_on_a_floor_of_the_architecture_page():
    floors = module_floors()
    assert [name for name, floor in floors.items() if floor is None] == []
    assert floors["django_bloom.engine.kinds.base"] == "engine"
    assert floors["django_bloom.filter"] == "handles"
    assert floors["django_bloom.ops.status"] == "features"
    assert floors["django_bloom.admin.forms"] == "faces"


def test_no_module_imports_from_a_floor_above_its_own():
    """Lazy imports (inside functions) and type-only ones count: a lower floor that
    needs something of a higher one is handed it (a registry the higher floor fills)."""
    named = {
        name: named_imports(name, path, package_modules())
        for name, path in package_modules().items()
    }
    assert arrows_up(named, module_floors()) == []


def test_an_arrow_up_is_found():
    floors = {"a": "engine", "b": "handles", "c": "faces"}
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a", "b"}}
    assert arrows_up(graph, floors) == ["a (engine) imports b (handles)"]


def test_modules_moved_down_a_floor_keep_their_old_paths():
    import importlib

    from django_bloom.normalizers import email_ci, get_normalizer
    from django_bloom.ops import capacity, counters

    moved = {"ops.counters": "counters", "ops.capacity": "capacity"}
    moved["unique.normalizers"] = "normalizers"
    for old, new in moved.items():
        module = importlib.import_module(f"django_bloom.{new}")
        assert importlib.import_module(f"django_bloom.{old}") is module
    assert (counters, capacity) == (importlib.import_module("django_bloom.counters"),
                                    importlib.import_module("django_bloom.capacity"))  # fmt: skip
    assert get_normalizer("django_bloom.unique.normalizers.email_ci") is email_ci


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
    """At most 21 public members on the base (Django's BasePasswordHasher has about a
    dozen; docs/architecture.md lists them); what only some kinds do is a capability
    class, never a flag on the base."""
    from django_bloom.engine.kinds import capabilities, layout_class, layout_names
    from django_bloom.engine.kinds.base import Layout

    public = {n for n in dir(Layout) if not n.startswith("_")} | set(Layout.__annotations__)
    section = ARCHITECTURE.read_text().split("## The layout protocol")[1].split("## Capab")[0]
    listed = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert sorted(public) == sorted(listed)  # the page's table is the protocol
    assert len(public) == int(re.search(r"these (\d+) members", section)[1]) <= 21
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
