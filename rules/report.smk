# Records -> tidy tables (each workload's rules.smk: its figures); `snakemake --report
# results/report.html` gathers them.
# Outputs marked update() are kept while their job runs, and put back as they were when it fails
# (Snakemake's own): a bad record or input never costs the tables or data made before.


rule aggregate:
    output:
        runs=report(update("results/tables/{run_set}-runs.csv"), caption="../report/runs.rst", category="{run_set}", subcategory="tables", labels={"table": "runs"}),
        convergence=report(update("results/tables/{run_set}-convergence.csv"), caption="../report/convergence.rst", category="{run_set}", subcategory="tables", labels={"table": "convergence"}),
        units=report(update("results/tables/{run_set}-units.csv"), caption="../report/units.rst", category="{run_set}", subcategory="tables", labels={"table": "timed units"}),
        points=report(update("results/tables/{run_set}-points.csv"), caption="../report/points.rst", category="{run_set}", subcategory="tables", labels={"table": "statistics per point"}),
        ratios=report(update("results/tables/{run_set}-ratios.csv"), caption="../report/ratios.rst", category="{run_set}", subcategory="tables", labels={"table": "ratios with intervals"}),
        environment=report(update("results/tables/{run_set}-environment.csv"), caption="../report/environment.rst", category="{run_set}", subcategory="tables", labels={"table": "environment"}),
        unsuccessful=report(update("results/tables/{run_set}-unsuccessful-runs.csv"), caption="../report/unsuccessful.rst", category="{run_set}", subcategory="tables", labels={"table": "failed or not applicable runs"}),
        utilisation=report(update("results/tables/{run_set}-utilisation.csv"), caption="../report/utilisation.rst", category="{run_set}", subcategory="tables", labels={"table": "utilisation samples"}),
    input:
        records=lambda wildcards: set_records(wildcards.run_set),
        # the last round's plan: why each point stopped (a timed set's)
        rounds=lambda wildcards: final_plan() if wildcards.run_set in TIMED_SETS else [],  # [] without rounds
        **script_inputs("aggregate.py"),
        python=env_input("report"),
    params:
        python=run_python,
        min_unit_seconds=MEASUREMENT["min_unit_seconds"],
        max_other_cpus=MEASUREMENT["max_other_cpus"],
        statistics=[
            "--confidence", MEASUREMENT["confidence"], "--resamples", MEASUREMENT["resamples"],
            "--cv-threshold", MEASUREMENT["cv_threshold"], "--seed", config["seed"],
        ],
        target=lambda wildcards: PLAN.accuracy_target(wildcards.run_set),
        frameworks=FRAMEWORKS,
    log:
        "results/logs/report/aggregate-{run_set}.log",
    benchmark:
        "results/benchmarks/aggregate/{run_set}.tsv"
    wildcard_constraints:
        run_set="|".join(map(re.escape, RUN_SETS)),
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} {input.records:q}"
        " --runs {output.runs:q} --convergence {output.convergence:q} --units {output.units:q} --points {output.points:q}"
        " --ratios {output.ratios:q} --min-unit-seconds {params.min_unit_seconds}"
        " --max-other-cpus {params.max_other_cpus} {params.statistics}"
        " {params.target} --frameworks {params.frameworks:q} --environment {output.environment:q}"
        " --unsuccessful {output.unsuccessful:q} --utilisation {output.utilisation:q} --rounds {input.rounds:q}"
        " > {log:q} 2>&1"


rule headline:
    output:
        report(update("results/tables/headline-ratios.csv"), caption="../report/headline.rst", category="headline", labels={"table": "ratios of every timed run set"}),
    input:
        # the timed run sets' (the memory pass's runs take a few steps: their time is no measurement)
        ratios=[f"results/tables/{name}-ratios.csv" for name in TIMED_SETS],
        **script_inputs("headline.py"),
        python=env_input("report"),
    params:
        python=run_python,
    log:
        "results/logs/report/headline.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} {input.ratios:q} --out {output:q} > {log:q} 2>&1"


# A/B in one run (config variants): each variant against its framework at every point, with a
# verdict; the report opens on it (report/workflow.rst), and the invocation's last lines say it.
rule ab:
    output:
        table=report("results/tables/ab.csv", caption="../report/ab.rst", category="A/B", labels={"table": "A/B verdicts"}),
        summary="results/ab/summary.html",  # report/workflow.rst opens on it
    input:
        units=[f"results/tables/{name}-units.csv" for name in TIMED_SETS if RUN_SETS[name][0] in WORKLOADS],
        **script_inputs("ab.py"),
        python=env_input("report"),
    params:
        python=run_python,
        threshold=MEASUREMENT["same_threshold"],
        confidence=MEASUREMENT["confidence"],
        resamples=MEASUREMENT["resamples"],
        seed=config["seed"],
    log:
        "results/logs/report/ab.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} {input.units:q} --threshold {params.threshold} --confidence {params.confidence}"
        " --resamples {params.resamples} --seed {params.seed} --out {output.table:q} --html {output.summary:q} > {log:q} 2>&1"
