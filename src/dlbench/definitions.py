"""The workloads' and studies' definitions, loaded: the definition.py of every training workload
that dlbench.workloads lists (through dlbench.declarations) and of every study that
dlbench.studies lists, imported once, and their run sets by name (a spec's `run_set`).

What needs a run set by its name imports this module (a spec read back, dlbench.specs; its
initial weights, dlbench.weights; the config's checks, dlbench.config); the definitions import
nothing of it, so it stands above them."""
import importlib

from dlbench.declarations import DEFINITIONS as WORKLOAD_DEFINITIONS
from dlbench.frameworks import FRAMEWORKS
from dlbench.studies import STUDIES
from dlbench.workloads import WORKLOADS

_STUDY_DEFINITIONS = {study: importlib.import_module(f"dlbench.studies.{study}.definition") for study in STUDIES}
_DEFINITIONS = {**WORKLOAD_DEFINITIONS, **_STUDY_DEFINITIONS}
_RUN_SETS = {run_set.name: run_set for definition in _DEFINITIONS.values() for run_set in definition.RUN_SETS}
# {run set name: the workload or study whose definition holds it}
_OWNERS = {run_set.name: name for name, definition in _DEFINITIONS.items() for run_set in definition.RUN_SETS}


def definition(name):
    """The definition module of a workload or a study."""
    return _DEFINITIONS[name]


def definition_module(name):
    """The module name of a workload's or a study's definition."""
    return f"dlbench.studies.{name}.definition" if name in STUDIES else f"dlbench.workloads.{name}.definition"


def run_sets(names=(*WORKLOADS, *STUDIES)):
    """{run set name: (workload or study, RunSet)} of the workloads and studies, in their order."""
    return {run_set.name: (name, run_set) for name in names for run_set in _DEFINITIONS[name].RUN_SETS}


def run_set(name):
    """The RunSet named `name` (a spec's run_set), or None."""
    return _RUN_SETS.get(name)


def runs_as(name):
    """The run set whose modules and initial weights the runs of run set `name` share (RunSet.runs_as)."""
    found = run_set(name)
    return found.runs_as_or_own if found else name


def workload_module(name, framework):
    """The module of a framework's runs of a run set (dlbench.sweep.RunSet: a-b is the package
    a.b of its workload's or study's folder, or that of the run set it runs as); of a run set of no
    framework, its task.py."""
    module = "task" if framework is None else FRAMEWORKS[framework].module
    package = runs_as(name).replace('-', '.')
    if _OWNERS.get(runs_as(name)) in STUDIES:
        return f"dlbench.studies.{package}.{module}"
    return f"dlbench.workloads.{package}.{module}"
