"""Which source files a job runs: its entry points and every dlbench module they import.

The workflow gives these files to each job as inputs, so that Snakemake reruns exactly the
jobs whose code changed. The imports are read from the source (ast), not by importing it:
the workflow's interpreter has none of the frameworks.
"""
import ast
from functools import cache
from pathlib import Path

PACKAGE = "dlbench"


def _module_file(src, module):
    """The file of a dlbench module (a package's __init__.py), or None if there is none."""
    path = Path(src, *module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# Parsed once per process: a Snakemake invocation asks for the code of every job, and the jobs share
# most of their files (the harness, the protocol, each framework's modules).
@cache
def _imports(path):
    """The dlbench modules a file imports (`from dlbench.x import y` may name a module y)."""
    found = set()
    for node in ast.walk(ast.parse(Path(path).read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")}


def code_files(src, modules=(), scripts=()):
    """Sorted paths of `scripts` and of the dlbench `modules`, with every dlbench module they
    import, transitively, and the __init__.py of each package on the way (run on import)."""
    return list(_code_files(Path(src), tuple(modules), tuple(Path(s) for s in scripts)))


@cache
def _code_files(src, modules, scripts):
    """code_files, once per process for each set of entry points."""
    todo = [Path(s) for s in scripts]
    seen_modules, files = set(), set()
    pending = list(modules)
    while todo or pending:
        if todo:
            path = todo.pop()
            if path in files:
                continue
            files.add(path)
            pending.extend(_imports(path))
            continue
        module = pending.pop()
        parts = module.split(".")
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            if name in seen_modules:
                continue
            seen_modules.add(name)
            path = _module_file(src, name)
            if path is not None:
                todo.append(path)
    return tuple(sorted(str(path) for path in files))
