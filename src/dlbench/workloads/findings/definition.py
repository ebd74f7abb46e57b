"""The studies' claims, answered from this run's tables: no runs of its own, one table
(results/tables/survey-claims.csv: each claim, one sentence answering it, the figures behind the
sentence and the tables they come from). What the workflow knows of it; dlbench.workloads says
what a definition holds."""

RUN_SETS = ()
FIGURES = ()
TABLES = ("claims",)
TARGET = None
READS = ("mnist", "imdb", "chestxray", "memory")   # the workloads whose tables answer the claims


def check(config):
    """Nothing to check: a claim whose workload is not configured says so."""
