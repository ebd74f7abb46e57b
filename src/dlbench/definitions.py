"""The workloads' definitions, loaded: the definition.py of every workload that dlbench.workloads
lists, imported once, and their run sets by name (a spec's `workload`).

What needs a run set by its name imports this module (a spec read back, dlbench.specs; its
initial weights, dlbench.weights; the config's checks, dlbench.config); the definitions import
nothing of it, so it stands above them."""
import importlib

from dlbench.frameworks import FRAMEWORKS
from dlbench.workloads import WORKLOADS

_DEFINITIONS = {workload: importlib.import_module(f"dlbench.workloads.{workload}.definition") for workload in WORKLOADS}
_RUN_SETS = {run_set.name: run_set for definition in _DEFINITIONS.values() for run_set in definition.RUN_SETS}


def definition(workload):
    """The workload's definition module."""
    return _DEFINITIONS[workload]


def run_sets(workloads=WORKLOADS):
    """{run set name: (workload, RunSet)} of the workloads, in their order."""
    return {run_set.name: (workload, run_set) for workload in workloads for run_set in _DEFINITIONS[workload].RUN_SETS}


def run_set(name):
    """The RunSet named `name` (a spec's workload), or None."""
    return _RUN_SETS.get(name)


def runs_as(name):
    """The run set whose modules and initial weights the runs of run set `name` share (RunSet.runs_as)."""
    found = run_set(name)
    return found.runs_as_or_own if found else name


def workload_module(name, framework):
    """The module of a framework's runs of a run set (dlbench.sweep.RunSet: a-b is the package
    a.b, or that of the run set it runs as); of a run set of no framework, its task.py."""
    module = "task" if framework is None else FRAMEWORKS[framework].module
    return f"dlbench.workloads.{runs_as(name).replace('-', '.')}.{module}"
