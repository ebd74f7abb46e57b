# Records -> tidy tables (each workload's rules.smk: its figures); `snakemake --report
# results/report.html` gathers them.
# Outputs marked update() are kept while their job runs, and put back as they were when it fails
# (Snakemake's own): a bad record or input never costs the tables or data made before.


rule aggregate:
    output:
        runs=report(update("results/tables/{workload}-runs.csv"), caption="../report/runs.rst", category="{workload}", subcategory="tables", labels={"table": "runs"}),
        convergence=report(update("results/tables/{workload}-convergence.csv"), caption="../report/convergence.rst", category="{workload}", subcategory="tables", labels={"table": "convergence"}),
        units=report(update("results/tables/{workload}-units.csv"), caption="../report/units.rst", category="{workload}", subcategory="tables", labels={"table": "timed units"}),
        points=report(update("results/tables/{workload}-points.csv"), caption="../report/points.rst", category="{workload}", subcategory="tables", labels={"table": "statistics per point"}),
        ratios=report(update("results/tables/{workload}-ratios.csv"), caption="../report/ratios.rst", category="{workload}", subcategory="tables", labels={"table": "ratios with intervals"}),
        environment=report(update("results/tables/{workload}-environment.csv"), caption="../report/environment.rst", category="{workload}", subcategory="tables", labels={"table": "environment"}),
        unsuccessful=report(update("results/tables/{workload}-unsuccessful-runs.csv"), caption="../report/unsuccessful.rst", category="{workload}", subcategory="tables", labels={"table": "failed or not applicable runs"}),
        utilisation=report(update("results/tables/{workload}-utilisation.csv"), caption="../report/utilisation.rst", category="{workload}", subcategory="tables", labels={"table": "utilisation samples"}),
    input:
        records=lambda wildcards: set_records(wildcards.workload),
        # the last round's plan: why each point stopped (a timed set's)
        rounds=lambda wildcards: final_plan() if wildcards.workload in TIMED_SETS else [],  # [] without rounds
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
        target=lambda wildcards: aggregate_target(wildcards.workload),
        frameworks=FRAMEWORKS,
    log:
        "results/logs/report/aggregate-{workload}.log",
    benchmark:
        "results/benchmarks/aggregate/{workload}.tsv"
    wildcard_constraints:
        workload="|".join(map(re.escape, RUN_SETS)),
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
        report(update("results/tables/headline-ratios.csv"), caption="../report/headline.rst", category="headline", labels={"table": "ratios of every workload"}),
    input:
        # the timed run sets' (the memory pass's runs take a few steps: their time is no measurement)
        ratios=lambda wildcards: [f"results/tables/{name}-ratios.csv" for name in record_sets() if RUN_SETS[name][1].timed],
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
