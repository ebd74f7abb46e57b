import shutil
import sys
from pathlib import Path

from snakemake.settings.types import DeploymentMethod
from snakemake.utils import min_version, validate

min_version("9.0")

# The workflow's own package (src/dlbench), so that every copy of the workflow runs its own code.
sys.path.insert(0, f"{workflow.basedir}/src")
from dlbench.config import check_renamed, check_yaml
from dlbench.errors import ConfigError
from dlbench.files import workflow_path
from dlbench.plan import Plan
from dlbench.scheduling import quiet_reevaluations
from dlbench.studies import STUDIES as KNOWN_STUDIES
from dlbench.workloads import WORKLOADS as KNOWN_WORKLOADS
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


SRC = workflow_path(workflow.basedir) / "src"
SCRIPTS = workflow_path(workflow.basedir) / "scripts"
ENVS = Path(workflow.basedir) / "envs"  # conda: files (workflow_path)
USE_CONDA = DeploymentMethod.CONDA in workflow.deployment_settings.deployment_method
if USE_CONDA and not shutil.which("conda"):  # before Snakemake's own "Error running conda info"
    raise WorkflowError("--use-conda needs conda, and there is none on this machine's PATH: install conda (e.g. "
                        "Miniforge), or run without --use-conda: the same envs/*.yaml then build as venvs "
                        "(docs/environments.md)")

# The config is checked here, once: renamed keys, the schema (which fills the defaults), then what the
# schema cannot say, as the plan of every run is made (dlbench.plan).
try:
    check_renamed(config)
    validate(config, "schemas/config.schema.yaml")
    PLAN = Plan(config, cores=workflow.cores, envs=ENVS, use_conda=USE_CONDA)
except ConfigError as err:
    raise WorkflowError(str(err))


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


include: "rules/lifecycle.smk"


report: "report/workflow.rst"


rule all:
    input:
        PLAN.targets(),
    default_target: True
