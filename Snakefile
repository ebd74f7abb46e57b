import sys

from snakemake.utils import min_version, validate

min_version("9.0")

# The workflow's own package (src/dlbench), so that every copy of the workflow runs its own code.
sys.path.insert(0, f"{workflow.basedir}/src")
from dlbench.config import check_renamed, check_yaml
from dlbench.errors import ConfigError
from dlbench.scheduling import quiet_reevaluations
from snakemake.scheduling.job_scheduler import JobScheduler

# One pending re-evaluation of the scheduler at a time: its rounds took 0.5 cores beside the runs
quiet_reevaluations(JobScheduler)

try:  # Snakemake's own message names neither the file nor the line
    check_yaml(f"{workflow.basedir}/config.yaml")
except ConfigError as err:
    raise WorkflowError(str(err))


# The workflow's own defaults wherever it runs (--directory elsewhere, -s <clone>/Snakefile): a bare
# "config.yaml" is read from the working folder, and skipped without a word where there is none.
configfile: f"{workflow.basedir}/config.yaml"


try:
    check_renamed(config)
except ConfigError as err:
    raise WorkflowError(str(err))
validate(config, "schemas/config.schema.yaml")


include: "rules/common.smk"
include: "rules/envs.smk"


# Every workload's own rules (its data and figures), then every study's, before the rules that read
# what they add (the raw files to fetch, the record sets).
for workload in KNOWN_WORKLOADS:
    include: f"src/dlbench/workloads/{workload}/rules.smk"
for study in KNOWN_STUDIES:
    include: f"src/dlbench/studies/{study}/rules.smk"


include: "rules/data.smk"
include: "rules/runs.smk"
include: "rules/report.smk"
include: "rules/compare.smk"


report: "report/workflow.rst"


workflow.create_report = report_when_no_run_holds_the_folder(workflow.create_report)


onstart:
    check_venvs()
    stop_jobs_on_sigterm()


onsuccess:
    report_runs(fail=config["fail_on_failed_runs"])


onerror:
    report_runs(fail=False)


rule all:
    input:
        all_targets(),
    default_target: True
