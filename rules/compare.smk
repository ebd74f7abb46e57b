# snakemake compare: this results folder against a baseline one (config compare.baseline),
# point by point, with a verdict. Not part of `all`: it needs a second results folder, e.g.
#   snakemake compare --config 'compare={baseline: ../before/results}'


rule compare:
    output:
        table=report("results/tables/compare.csv", caption="../report/compare.rst", category="compare"),
        figure=report("results/figures/compare.png", caption="../report/compare-figure.rst", category="compare"),
    input:
        new=[f"results/tables/{name}-units.csv" for name in RUN_SETS],
        old=compare_baseline_tables,
        # the CPUs each side ran on: a warning, and the table's same_cpu, when they differ
        new_environments=[f"results/tables/{name}-environment.csv" for name in RUN_SETS],
        old_environments=compare_baseline_environments,
        **script_inputs("compare.py"),
        python=env_input("report"),
    params:
        python=run_python,
        baseline=config["compare"]["baseline"],
        results=lambda wildcards, input: str(Path(input.new[0]).parent.parent),
        threshold=config["compare"]["threshold"],
        confidence=config["measurement"]["confidence"],
        resamples=config["measurement"]["resamples"],
        cv_threshold=config["measurement"]["cv_threshold"],
        seed=config["seed"],
    log:
        "results/logs/report/compare.log",
    conda:
        stack_env_file("report")
    # the summary (N points: a faster, b slower, c same) and any CPU warning are the answer:
    # shown, not only logged
    shell:
        "{params.python:q} {input.script:q} {params.baseline:q} {params.results:q}"
        " --csv {output.table:q} --figure {output.figure:q} --threshold {params.threshold}"
        " --confidence {params.confidence} --resamples {params.resamples} --cv-threshold {params.cv_threshold}"
        " --seed {params.seed} > {log:q} 2>&1"
        " && cat {log:q}"
