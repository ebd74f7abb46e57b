# What this run found (definition.py): the replication table and the summary that the report's
# first view shows (report/workflow.rst), from the tables of the configured workloads and studies; a
# claim whose tables this run lacks says what would measure it.
import shlex

from dlbench.studies.findings.definition import SUMMARY as FINDINGS_SUMMARY

FINDINGS_FOLDER = Path(workflow.current_basedir)
FINDINGS_SCRIPTS = [workflow_path(FINDINGS_FOLDER / "scripts" / name) for name in ("replication.py", "summary.py")]
# the tables the claims read: those each configured workload and study declares (CLAIM_TABLES)
FINDINGS_CLAIM_TABLES = [table for name in [*WORKLOADS, *STUDIES] for table in getattr(definition(name), "CLAIM_TABLES", ())]


include: "code_lines.smk"
include: "time.smk"
include: "models.smk"


rule findings:
    output:
        replication=report("results/tables/findings-replication.csv", caption="report/replication-table.rst",
                           category="findings", labels={"table": "the studies' claims, this run's verdicts"}),
        summary=FINDINGS_SUMMARY,
        overview=report("results/tables/findings-overview.csv", caption="report/overview-table.rst", category="findings",
                        labels={"table": "every framework on every run set"}),
        overview_figure=report("results/figures/findings/overview.png", caption="report/overview-figure.rst",
                               category="findings", labels={"figure": "every framework on every run set"}),
        ratios=[report(f"results/figures/findings/ratios-{name}.png", caption="report/ratios-figure.rst",
                       category="findings", labels={"figure": f"{name}: throughput against the reference"})
                for name in TIMED_SETS],
    input:
        claims=[f"results/tables/{table}.csv" for table in FINDINGS_CLAIM_TABLES],
        points=[f"results/tables/{name}-points.csv" for name in TIMED_SETS],
        ratios=[f"results/tables/{name}-ratios.csv" for name in TIMED_SETS],
        runs=[f"results/tables/{name}-runs.csv" for name in TIMED_SETS],
        environment=[f"results/tables/{name}-environment.csv" for name in TIMED_SETS],
        # how close to the machine: each point against the peak of the precision it computed in (study matmul)
        mfu=["results/tables/matmul-mfu.csv"] if "matmul" in STUDIES else [],
        # each model against its workload's own (models.smk), where this run trains two
        models=["results/tables/findings-models.csv", "results/figures/findings/models.png"] if MODEL_PAIRS else [],
        # the studies' own published figures, set beside this run's in the replication table
        studies=local(str(workflow_path(FINDINGS_FOLDER / "studies.yaml"))),
        scripts=[local(str(script)) for script in FINDINGS_SCRIPTS],
        code=[local(f) for f in code_files(SRC, scripts=FINDINGS_SCRIPTS)],
        python=env_input("report"),
    params:
        python=run_python,
        workloads=WORKLOADS,
        studies=STUDIES,
        frameworks=FRAMEWORKS,
        synthetic="--synthetic-images" if "chestxray" in WORKLOADS and not config["chestxray"]["images_dir"] else "",
        sets=TIMED_SETS,
        samples=[RUN_SETS[name][1].sample for name in TIMED_SETS],
        models=lambda wildcards, input: f"--models {shlex.quote(input.models[0])} --models-figure {shlex.quote(input.models[1])}" if input.models else "",
    log:
        "results/logs/report/findings.log",
    conda:
        stack_env_file("report")
    shell:
        "({params.python:q} {input.scripts[0]:q} --tables-dir results/tables --workloads {params.workloads:q}"
        " --studies {params.studies:q}"
        " --frameworks {params.frameworks:q} {params.synthetic} --studies-figures {input.studies:q}"
        " --out {output.replication:q}"
        " && {params.python:q} {input.scripts[1]:q} --sets {params.sets:q} --samples {params.samples:q}"
        " --points {input.points:q} --ratios {input.ratios:q} --runs {input.runs:q}"
        " --environment {input.environment:q} --replication {output.replication:q} --mfu {input.mfu:q}"
        " --frameworks {params.frameworks:q} --overview {output.overview:q} {params.models}"
        " --figures results/figures/findings --out {output.summary:q}) > {log:q} 2>&1"
