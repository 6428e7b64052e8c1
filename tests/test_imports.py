"""The package's import structure: no import cycle, neither among module-level imports nor
counting every import statement (those inside functions too: a cycle hidden in a function is
still one layer reaching up into another), and every module imports on its own (first, in an
interpreter where no other edge_infer module is loaded yet)."""
import ast
import os
import subprocess
import sys

import edge_infer

PKG_DIR = os.path.dirname(os.path.abspath(edge_infer.__file__))
ROOT = os.path.dirname(PKG_DIR)


def package_modules():
    """{module name: (path, is a package)} of every module of edge_infer."""
    mods = {}
    for dirpath, _, files in os.walk(PKG_DIR):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                is_pkg = rel.endswith(".__init__")
                mods[rel[:-len(".__init__")] if is_pkg else rel] = (path, is_pkg)
    return mods


def _module_level_imports(body):
    """Import statements that run when the module is imported: top level and inside top-level
    if/try blocks, but not under ``if TYPE_CHECKING`` and not inside functions (lazy imports)."""
    for st in body:
        if isinstance(st, (ast.Import, ast.ImportFrom)):
            yield st
        elif isinstance(st, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(st.test):
                yield from _module_level_imports(st.body)
                yield from _module_level_imports(st.orelse)
        elif isinstance(st, ast.Try):
            for part in (st.body, st.orelse, st.finalbody, *[h.body for h in st.handlers]):
                yield from _module_level_imports(part)


def _all_imports(tree):
    """Every import statement of a module, wherever it is (functions, methods, branches)."""
    return [st for st in ast.walk(tree) if isinstance(st, (ast.Import, ast.ImportFrom))]


def import_graph(everywhere: bool = False, sites: dict = None):
    """module -> the edge_infer modules it imports (``from pkg import sub`` names the submodule;
    ``from pkg import name`` names the package): at module level, or with ``everywhere`` every
    import statement. ``sites``, if given, gets (module, imported module) -> "path:line" of
    the first statement making that edge."""
    mods = package_modules()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        base = name if is_pkg else name.rsplit(".", 1)[0]
        deps = {}
        with open(path) as f:
            tree = ast.parse(f.read())
        for st in (_all_imports(tree) if everywhere else _module_level_imports(tree.body)):
            if isinstance(st, ast.Import):
                targets = [a.name for a in st.names if a.name.split(".")[0] == "edge_infer"]
            else:
                if st.level:
                    parts = base.split(".")
                    target = ".".join(parts[:len(parts) - st.level + 1] + ([st.module] if st.module else []))
                else:
                    target = st.module or ""
                if target.split(".")[0] != "edge_infer":
                    continue
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in st.names]
            for d in targets:
                deps.setdefault(d, f"{os.path.relpath(path, ROOT)}:{st.lineno}")
        graph[name] = {d for d in deps if d in mods and d != name}
        if sites is not None:
            sites.update({(name, d): deps[d] for d in graph[name]})
    return graph


def find_cycle(graph):
    """One import cycle as a list of modules (first == last), or None."""
    state = {}
    stack = []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        state[v] = 2
        stack.pop()
        return None

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(graph):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_the_import_graph_walk_finds_a_cycle():
    """The checker itself: a planted cycle is found, an acyclic graph passes."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    graph = import_graph()
    assert "edge_infer.ops.shapes" in graph["edge_infer.ops.conv"]
    assert "edge_infer.ir.graph" in graph["edge_infer.ops.shapes"]


def test_no_import_cycle_in_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_of_every_import_counts_imports_in_functions():
    """``everywhere`` sees an import inside a function (the picker asks the probe only when it
    profiles a device); the module-level graph does not."""
    sites = {}
    everywhere, top = import_graph(everywhere=True, sites=sites), import_graph()
    assert "edge_infer.probe" in everywhere["edge_infer.backends.picker"]
    assert "edge_infer.probe" not in top["edge_infer.backends.picker"]
    assert sites[("edge_infer.backends.picker", "edge_infer.probe")].startswith(
        os.path.join("edge_infer", "backends", "picker.py") + ":")
    assert all(top[m] <= deps for m, deps in everywhere.items())


def test_no_import_cycle_counting_imports_in_functions():
    """No module imports, even inside a function, a module that imports it back (directly or
    through others): layers import downward only (docs/architecture.md, "Import layering")."""
    sites = {}
    cycle = find_cycle(import_graph(everywhere=True, sites=sites))
    assert cycle is None, "import cycle (imports inside functions counted): " + " -> ".join(cycle) + "\n" + \
        "\n".join(f"  {a} -> {b}  ({sites[(a, b)]})" for a, b in zip(cycle, cycle[1:]))


CHILD = r"""
import importlib, sys
names = sys.argv[1:]
bad = []
for name in names:
    for m in [m for m in sys.modules if m == "edge_infer" or m.startswith("edge_infer.")]:
        del sys.modules[m]
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:           # an optional dependency that is not installed here
        if (e.name or "").split(".")[0] == "edge_infer":
            bad.append(f"{name}: {type(e).__name__}: {e}")
    except Exception as e:                       # noqa: BLE001
        bad.append(f"{name}: {type(e).__name__}: {e}")
print("\n".join(bad))
"""


def test_every_module_imports_first():
    """Each module imported as the first edge_infer module of the process (the package's other
    modules dropped from sys.modules in between): a partially initialised module anywhere on
    its import path would fail here."""
    names = sorted(n for n in package_modules() if not n.endswith("__main__"))
    out = subprocess.run([sys.executable, "-c", CHILD, *names], capture_output=True, text=True, timeout=600,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", out.stdout
