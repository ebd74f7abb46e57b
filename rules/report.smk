# Records -> tidy tables -> figures; `snakemake --report results/report.html` gathers them.
# Outputs marked update() are kept while their job runs (and, with keep-incomplete in the
# profile, when it fails): a bad record or input never costs the tables or data made before.


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
        records=lambda wildcards: RECORD_SETS[wildcards.workload](),
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
        target=lambda wildcards: ["--target", "test_accuracy", config[wildcards.workload]["target_accuracy"]]
        if wildcards.workload in ("mnist", "imdb") else [],
        frameworks=FRAMEWORKS,
    log:
        "results/logs/report/aggregate-{workload}.log",
    wildcard_constraints:
        workload="|".join(RECORD_SETS),
    conda:
        "../envs/report.yaml"
    shell:
        "{params.python:q} {input.script:q} {input.records:q}"
        " --runs {output.runs:q} --convergence {output.convergence:q} --units {output.units:q} --points {output.points:q}"
        " --ratios {output.ratios:q} --min-unit-seconds {params.min_unit_seconds}"
        " --max-other-cpus {params.max_other_cpus} {params.statistics}"
        " {params.target} --frameworks {params.frameworks:q} --environment {output.environment:q}"
        " --unsuccessful {output.unsuccessful:q} --utilisation {output.utilisation:q} > {log:q} 2>&1"


rule plot_mnist:
    output:
        **{
            name.replace("-", "_"): report(f"results/figures/mnist/{name}.png", caption=f"../report/mnist-{name}.rst", category="mnist", subcategory="figures")
            for name in MNIST_FIGURES
        },
    input:
        runs="results/tables/mnist-runs.csv",
        convergence="results/tables/mnist-convergence.csv",
        units="results/tables/mnist-units.csv",
        points="results/tables/mnist-points.csv",
        ratios="results/tables/mnist-ratios.csv",
        **script_inputs("plot_mnist.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.throughput).parent,
    log:
        "results/logs/report/plot-mnist.log",
    conda:
        "../envs/report.yaml"
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs:q} --convergence {input.convergence:q} --units {input.units:q}"
        " --points {input.points:q} --ratios {input.ratios:q} --outdir {params.outdir:q} > {log:q} 2>&1"


rule plot_imdb:
    output:
        **{
            name.replace("-", "_"): report(f"results/figures/imdb/{name}.png", caption=f"../report/imdb-{name}.rst", category="imdb", subcategory="figures")
            for name in IMDB_FIGURES
        },
        table=report("results/tables/imdb-epoch-time-by-batch-and-workers.csv", caption="../report/imdb-epoch-time-table.rst", category="imdb", subcategory="tables", labels={"table": "mean epoch time by batch size and workers"}),
    input:
        runs="results/tables/imdb-runs.csv",
        convergence="results/tables/imdb-convergence.csv",
        units="results/tables/imdb-units.csv",
        points="results/tables/imdb-points.csv",
        ratios="results/tables/imdb-ratios.csv",
        **script_inputs("plot_imdb.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.epoch_time).parent,
        convergence_batch=IMDB["convergence_batch"],
    log:
        "results/logs/report/plot-imdb.log",
    conda:
        "../envs/report.yaml"
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs:q} --convergence {input.convergence:q} --units {input.units:q} --outdir {params.outdir:q}"
        " --points {input.points:q} --ratios {input.ratios:q}"
        " --table {output.table} --convergence-batch {params.convergence_batch} > {log} 2>&1"


rule plot_chestxray:
    output:
        **{
            name.replace("-", "_"): report(f"results/figures/chestxray/{name}.png", caption=f"../report/chestxray-{name}.rst", category="chestxray", subcategory="figures")
            for name in CHESTXRAY_FIGURES
        },
        minutes_table=report("results/tables/chestxray-train-minutes.csv", caption="../report/chestxray-train-minutes-table.rst", category="chestxray", subcategory="tables", labels={"table": "train + validation minutes"}),
        auc_table=report("results/tables/chestxray-test-auc.csv", caption="../report/chestxray-test-auc-table.rst", category="chestxray", subcategory="tables", labels={"table": "test AUC per finding"}),
        verdict_table=report("results/tables/chestxray-loader-verdict.csv", caption="../report/chestxray-loader-verdict.rst", category="chestxray", subcategory="tables", labels={"table": "which loaders keep a trainer fed"}),
    input:
        runs="results/tables/chestxray-runs.csv",
        convergence="results/tables/chestxray-convergence.csv",
        units="results/tables/chestxray-units.csv",
        points="results/tables/chestxray-points.csv",
        utilisation="results/tables/chestxray-utilisation.csv",
        loader_points="results/tables/chestxray-loader-points.csv",
        preprocess_points="results/tables/chestxray-preprocess-points.csv",
        decode_points="results/tables/chestxray-decode-points.csv",
        **script_inputs("plot_chestxray.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.auc).parent,
        image_source=IMAGE_SOURCE,
    log:
        "results/logs/report/plot-chestxray.log",
    conda:
        "../envs/report.yaml"
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs} --convergence {input.convergence:q} --units {input.units:q}"
        " --points {input.points:q} --utilisation {input.utilisation:q} --loader-points {input.loader_points:q}"
        " --preprocess-points {input.preprocess_points:q} --decode-points {input.decode_points:q}"
        " --outdir {params.outdir} --minutes-table {output.minutes_table} --auc-table {output.auc_table}"
        " --verdict-table {output.verdict_table} --image-source {params.image_source:q} > {log} 2>&1"


rule headline:
    output:
        report(update("results/tables/headline-ratios.csv"), caption="../report/headline.rst", category="headline", labels={"table": "ratios of every workload"}),
    input:
        ratios=lambda wildcards: [f"results/tables/{name}-ratios.csv" for name in record_sets()],
        **script_inputs("headline.py"),
        python=env_input("report"),
    params:
        python=run_python,
    log:
        "results/logs/report/headline.log",
    conda:
        "../envs/report.yaml"
    shell:
        "{params.python:q} {input.script:q} {input.ratios:q} --out {output:q} > {log:q} 2>&1"
