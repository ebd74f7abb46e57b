"""What this run found, the report's first view: no runs of its own. From the tables of the
configured workloads: the replication table (every claim of the studies, with a verdict computed
from this run's tables and the criterion it used), the summary (the machine and versions; per timed
run set the fastest framework at each point and a forest plot of every framework's throughput
relative to one reference) that report/workflow.rst shows first, the lines of framework-specific
code per framework and workload, and where the run's time went. What the workflow knows of it;
dlbench.workloads says what a definition holds, dlbench.studies what a study is."""

RUN_SETS = ()
FIGURES = ("code-lines", "time")
TABLES = ("replication", "code-lines", "time")
TARGET = None
SUMMARY = "results/findings/summary.html"   # report/workflow.rst includes it
CLAIM_TABLES = ("findings-code-lines",)


def check(config):
    """Nothing to check: a claim whose workload is not configured says so."""
