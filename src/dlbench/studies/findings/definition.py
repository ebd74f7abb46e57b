"""What this run found, the report's first view: no runs of its own. From the tables of the
configured workloads: the replication table (every claim of the studies, with a verdict computed
from this run's tables and the criterion it used), the summary (the machine and versions; per timed
run set the fastest framework at each point and a forest plot of every framework's throughput
relative to one reference) that report/workflow.rst shows first, a workload's other model against
its own on the same data (IMDB's Transformer against its LSTM: `model_pairs`), the lines of
framework-specific code per framework and workload, and where the run's time went. What the
workflow knows of it; dlbench.workloads says what a definition holds, dlbench.studies what a study is."""
from dlbench.declarations import models

RUN_SETS = ()
FIGURES = ("code-lines", "time", "models")
TABLES = ("replication", "code-lines", "time", "models")
TARGET = None
SUMMARY = "results/findings/summary.html"   # report/workflow.rst includes it
CLAIM_TABLES = ("findings-code-lines",)


def model_pairs(workloads):
    """[(run set, the run set it is held against, their sample)]: each further model a workload trains
    on its data (a timed run set of framework runs with shared initial weights, after the workload's
    own) against the workload's own model (IMDB's Transformer, imdb-transformer, against its LSTM,
    imdb): scripts/models.py compares them framework by framework."""
    pairs = []
    for workload in workloads:
        own, *others = models(workload)
        pairs += [(other.name, own.name, own.sample) for other in others]
    return pairs


def check(config):
    """Nothing to check: a claim whose workload is not configured says so."""
