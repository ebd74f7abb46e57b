# The survey's claims (definition.py): one sentence each, from the ratios and memory tables of the
# configured workloads; a claim whose tables this run lacks says what would measure it.
from dlbench.workloads.survey.definition import READS as SURVEY_READS

SURVEY_FOLDER = Path(workflow.current_basedir)
SURVEY_RATIOS = [f"results/tables/{workload}-ratios.csv" for workload in SURVEY_READS
                 if workload in WORKLOADS and workload in RUN_SETS]
SURVEY_MEMORY = ["results/tables/memory-peaks.csv"] if "memory" in WORKLOADS else []


rule survey_claims:
    output:
        report("results/tables/survey-claims.csv", caption="report/claims-table.rst", category="survey",
               labels={"table": "the studies' claims, answered"}),
    input:
        ratios=SURVEY_RATIOS,
        memory=SURVEY_MEMORY,
        **script_inputs(SURVEY_FOLDER / "scripts" / "claims.py"),
        python=env_input("report"),
    params:
        python=run_python,
    log:
        "results/logs/report/survey-claims.log",
    conda:
        str(ENVS / "report.yaml")
    shell:
        "{params.python:q} {input.script:q} --ratios {input.ratios:q} --memory {input.memory:q}"
        " --out {output:q} > {log:q} 2>&1"
