from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


validate(config, "schemas/config.schema.yaml")


include: "rules/common.smk"
include: "rules/envs.smk"
include: "rules/data.smk"
include: "rules/mnist.smk"
include: "rules/imdb.smk"
include: "rules/chestxray.smk"
include: "rules/runs.smk"
include: "rules/report.smk"


report: "report/workflow.rst"


onsuccess:
    report_runs(fail=config["fail_on_failed_runs"])


onerror:
    report_runs(fail=False)


rule all:
    input:
        all_targets(),
    default_target: True
