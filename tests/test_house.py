"""The package's shape (src/dlbench), read from its own imports: every module on a floor, each
importing only modules on floors below it. A module's floor is the longest chain of imports from
it down to a module that imports nothing of the package (the ground floor, 0).

An import counts wherever it is written: at module level, inside a function, or by name through
importlib.import_module (a literal, or an f-string: every module its pattern matches; or a name
the package defines whose value or returned strings are such patterns). The graph has no loop.

An import of a package module inside a function is there for one reason only: to keep a
framework out of its importer, which then runs without that framework. So the module it imports
is framework code: it imports (anywhere in it: an adapter imports its framework in its functions)
a package that is neither the standard library's nor the driver's (requirements.txt), or it
imports such a module at module level; an import by name is a run-time choice (of an adapter, of
a workload's module), framework code where any of the modules it may import is. Any other
import of the package is at module level."""
import ast
import re
import sys
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "dlbench"
# requirement name -> the name it is imported by, where they differ
IMPORT_NAMES = {"pyyaml": "yaml", "pytest-xdist": "xdist"}


def module_name(path, root=PACKAGE):
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def driver_packages():
    """The top-level import names of the driver's requirements (requirements.txt)."""
    names = set()
    for line in (REPO / "requirements.txt").read_text().splitlines():
        requirement = re.match(r"[A-Za-z0-9_.-]+", line.split("#")[0].strip())
        if requirement:
            name = requirement[0].lower()
            names.add(IMPORT_NAMES.get(name, name.replace("-", "_")))
    return names


class Imports:
    """The package's modules and what each imports of the package (where and how) and outside it."""

    def __init__(self, root=PACKAGE):
        self.root = root
        self.paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
        self.trees = {m: ast.parse(p.read_text(), str(p)) for m, p in self.paths.items()}
        self.edges = {m: {} for m in self.paths}      # module -> {imported module: "module" or "function"}
        self.outside = {m: set() for m in self.paths}  # module -> top-level names of what it imports outside the package
        self.by_name = {m: {} for m in self.paths}     # module -> {line: the modules an import_module there may import}
        self.unresolved = []                           # (module, line): import_module of a name not read here
        for module in self.paths:
            self._read(module)

    # -- reading one module
    def _read(self, module):
        tree = self.trees[module]
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                       for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            where = "function" if id(node) in in_function else "module"
            for target in self._targets(module, node):
                if target in self.paths and target != module:
                    # an import at module level stays one: "module" wins over "function"
                    if self.edges[module].get(target) != "module":
                        self.edges[module][target] = where
                elif not target.startswith(self.root.name + ".") and target != self.root.name:
                    self.outside[module].add(target.split(".")[0])

    def _absolute(self, module, node):
        if not node.level:
            return node.module or ""
        base = module.split(".") if self.paths[module].name == "__init__.py" else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def _known(self, name):
        """The longest prefix of a dotted name that is a module of the package (or the name)."""
        probe = name
        while probe and probe not in self.paths:
            probe = probe.rpartition(".")[0]
        return probe or name

    def _targets(self, module, node):
        if isinstance(node, ast.Import):
            return [self._known(alias.name) for alias in node.names]
        if isinstance(node, ast.ImportFrom):
            base = self._absolute(module, node)
            submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in self.paths]
            names = [alias.name for alias in node.names if f"{base}.{alias.name}" not in self.paths]
            return submodules + ([self._known(base)] if names or not submodules else [])
        if isinstance(node, ast.Call) and self._is_import_module(node.func) and node.args:
            patterns = self._patterns(module, node.args[0], set())
            if patterns is None:
                self.unresolved.append((module, node.lineno))
                return []
            matches = sorted(m for m in self.paths if any(re.fullmatch(pattern, m) for pattern in patterns))
            self.by_name[module][node.lineno] = matches
            return matches
        return []

    @staticmethod
    def _is_import_module(func):
        return (isinstance(func, ast.Attribute) and func.attr == "import_module"
                or isinstance(func, ast.Name) and func.id == "import_module")

    def _patterns(self, module, expr, seen):
        """The regular expressions of the package's module names `expr` can be: its strings that
        name one, through the names it reads (defined in its module or imported from the package);
        None where none is found."""
        found = set()
        for node in ast.walk(expr):
            text = self._pattern(node)
            if text is not None:
                found.add(text)
            elif isinstance(node, (ast.Name, ast.Attribute)):
                name = node.id if isinstance(node, ast.Name) else node.attr
                for where, definition in self._definitions(module, name):
                    if (where, name) not in seen:
                        seen.add((where, name))
                        found |= self._patterns(where, definition, seen) or set()
        return found or None

    def _pattern(self, node):
        prefix = self.root.name + "."
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(prefix):
            return re.escape(node.value)
        if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant) \
                and str(node.values[0].value).startswith(prefix):
            return "".join(re.escape(part.value) if isinstance(part, ast.Constant) else r"[^.]+" for part in node.values)
        return None

    @lru_cache(maxsize=None)
    def _definitions(self, module, name):
        """Where `name` is defined as seen from `module`: its function or module-level assignment
        there, or in the package module it is imported from."""
        found = []
        for node in self.trees[module].body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                found.append((module, node))
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                found.append((module, node.value))
            elif isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
                source = self._known(self._absolute(module, node))
                original = next(a.name for a in node.names if (a.asname or a.name) == name)
                if source in self.paths and source != module:
                    found.extend(self._definitions(source, original))
        return tuple(found)

    # -- the shape
    def loops(self):
        """The strongly connected components of more than one module (Tarjan's), each sorted."""
        index, low, stack, on_stack, loops = {}, {}, [], set(), []

        def visit(v):
            index[v] = low[v] = len(index)
            stack.append(v)
            on_stack.add(v)
            for w in self.edges[v]:
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    loops.append(sorted(component))

        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 10 * len(self.paths)))
        try:
            for v in self.paths:
                if v not in index:
                    visit(v)
        finally:
            sys.setrecursionlimit(limit)
        return loops

    def cycle_through(self, component):
        """One loop of imports inside a strongly connected component, as a path a -> b -> ... -> a."""
        inside = set(component)
        start = component[0]
        path, seen = [start], {start}
        while True:
            nxt = next(w for w in sorted(self.edges[path[-1]]) if w in inside and self._reaches(w, start, inside))
            if nxt in seen:
                return path[path.index(nxt):] + [nxt]
            path.append(nxt)
            seen.add(nxt)

    def _reaches(self, a, b, inside):
        todo, seen = [a], {a}
        while todo:
            v = todo.pop()
            if v == b:
                return True
            for w in self.edges[v]:
                if w in inside and w not in seen:
                    seen.add(w)
                    todo.append(w)
        return False

    def floors(self):
        """{module: its floor}: 0 for a module that imports nothing of the package, else one more
        than the highest floor it imports (the graph must have no loop)."""
        floors = {}

        def floor(v):
            if v not in floors:
                floors[v] = None  # on the way: a loop would read None
                floors[v] = 1 + max((floor(w) for w in self.edges[v]), default=-1)
            return floors[v]

        for v in self.paths:
            floor(v)
        return floors

    def framework_modules(self):
        """The modules that are framework code: those that import a package outside the standard
        library and the driver's requirements (at module level or in a function), and those that
        import such a module at module level."""
        allowed = set(sys.stdlib_module_names) | driver_packages() | {"__future__"}
        result = {m for m, names in self.outside.items() if names - allowed}
        changed = True
        while changed:
            changed = False
            for m, targets in self.edges.items():
                if m not in result and any(w in result for w, where in targets.items() if where == "module"):
                    result.add(m)
                    changed = True
        return result

    def dodging_imports(self):
        """(importer, imported) of the imports of the package inside a function that keep no
        framework out: the module imported is no framework code; or, imported by name, none of
        the modules the name may be is (a choice among adapters at run time includes a framework's)."""
        frameworks = self.framework_modules()
        chosen = {(m, w): targets for m, lines in self.by_name.items() for targets in lines.values() for w in targets}
        return [(m, w) for m, w in self.function_imports()
                if w not in frameworks and not (set(chosen.get((m, w), ())) & frameworks)]

    def function_imports(self):
        """(importer, imported) of every import of a package module inside a function."""
        return sorted((m, w) for m, targets in self.edges.items() for w, where in targets.items() if where == "function")


@pytest.fixture(scope="module")
def house():
    return Imports()


def test_the_imports_have_no_loop(house):
    loops = house.loops()
    assert not loops, "imports in a loop:\n" + "\n".join(" -> ".join(house.cycle_through(c)) for c in loops)


def test_an_import_inside_a_function_keeps_a_framework_out(house):
    dodging = [f"{m} -> {w}" for m, w in house.dodging_imports()]
    assert not dodging, ("imports of the package inside a function, of modules that are no framework code "
                         "(move them to module level):\n" + "\n".join(dodging))


# Modules that import by name what their arguments name: a process's entry point, whose launcher
# (in the package, read here) chooses its target; nothing imports them but to start them.
BY_ARGUMENT = {"dlbench.frameworks.chainer.ranks": "each chainermn rank calls the target its launcher wrote"}


def test_every_import_by_name_is_read(house):
    unread = [(m, line) for m, line in house.unresolved if m not in BY_ARGUMENT]
    assert not unread, f"importlib.import_module of a name this test cannot read: {unread}"


# The registries, plain data on the ground floor: what the config, specs, weights and tables read
# of the workloads, studies and frameworks, imported downward only (the frameworks' table reads
# the errors alone).
REGISTRIES = {"dlbench.workloads": 0, "dlbench.studies": 0, "dlbench.frameworks": 1}


def test_the_registries_are_on_the_ground_floor(house):
    """The registries import nothing above the errors; printed: the modules on each floor (pytest -s)."""
    floors = house.floors()
    assert {m: floors[m] for m in REGISTRIES} == REGISTRIES, {m: sorted(house.edges[m]) for m in REGISTRIES}
    print(f"\n{len(floors)} modules on {max(floors.values()) + 1} floors")
    for level in range(max(floors.values()) + 1):
        print(level, sorted(m for m, f in floors.items() if f == level))


def test_the_reading_sees_every_kind_of_import(tmp_path):
    """The reader itself, on a small package: a module-level, a function-level and a by-name import,
    each of which closes a loop; and a framework kept out by a function-level import."""
    package = tmp_path / "dlbench"
    (package / "kinds").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("def f():\n    from dlbench.high import x\n")
    (package / "high.py").write_text("from dlbench import low\nx = 1\n")
    (package / "kinds" / "__init__.py").write_text(
        "import importlib\n\ndef one(kind):\n    return importlib.import_module(f'dlbench.kinds.{kind}.definition')\n")
    (package / "kinds" / "a").mkdir()
    (package / "kinds" / "a" / "__init__.py").write_text("")
    (package / "kinds" / "a" / "definition.py").write_text("from dlbench.kinds import one\n")
    (package / "framework.py").write_text("import torch\n")
    (package / "user.py").write_text("def run():\n    from dlbench import framework\n")
    house = Imports(package)
    assert sorted(house.loops()) == [["dlbench.high", "dlbench.low"], ["dlbench.kinds", "dlbench.kinds.a.definition"]]
    assert house.cycle_through(["dlbench.high", "dlbench.low"]) == ["dlbench.high", "dlbench.low", "dlbench.high"]
    assert house.framework_modules() == {"dlbench.framework"}
    assert ("dlbench.user", "dlbench.framework") in house.function_imports()
