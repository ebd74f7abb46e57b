"""What the training workloads declare for the studies (dlbench.workloads says what each
declaration is): the definition.py of every workload that dlbench.workloads lists, imported once,
and each declaration gathered by its name, in the registry's order.

The studies' definitions read it (a study names no workload); dlbench.definitions, which loads
the studies' definitions beside these, stands above it."""
import importlib

from dlbench.workloads import WORKLOADS

DEFINITIONS = {workload: importlib.import_module(f"dlbench.workloads.{workload}.definition") for workload in WORKLOADS}


def workload_definition(workload):
    """A training workload's definition module."""
    return DEFINITIONS[workload]


def declared(name, workloads=WORKLOADS):
    """{workload: its declaration `name`} of the workloads (those given, in the registry's order)
    that declare it (not None)."""
    return {workload: getattr(DEFINITIONS[workload], name) for workload in WORKLOADS
            if workload in workloads and getattr(DEFINITIONS[workload], name, None) is not None}


def models(workload):
    """The run sets of a workload whose runs train a model, its own first: its first run set, then every
    other timed one that trains a framework's model from shared initial weights on the same data
    (IMDB's Transformer beside its LSTM; not ChestX-ray's loader and image-library benchmarks). The
    memory pass measures each; the findings set each further one against the first."""
    first, *others = DEFINITIONS[workload].RUN_SETS
    return (first, *(run_set for run_set in others
                     if run_set.timed and run_set.subject == "framework" and run_set.draw_weights is not None))
