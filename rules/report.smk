# Records -> tidy tables -> figures; `snakemake --report results/report.html` gathers them.


rule aggregate:
    output:
        runs=report("results/tables/{workload}-runs.csv", caption="../report/runs.rst", category="{workload}", subcategory="tables", labels={"table": "runs"}),
        epochs=report("results/tables/{workload}-epochs.csv", caption="../report/epochs.rst", category="{workload}", subcategory="tables", labels={"table": "epochs"}),
        environment=report("results/tables/{workload}-environment.csv", caption="../report/environment.rst", category="{workload}", subcategory="tables", labels={"table": "environment"}),
        unsuccessful=report("results/tables/{workload}-unsuccessful-runs.csv", caption="../report/unsuccessful.rst", category="{workload}", subcategory="tables", labels={"table": "failed or not applicable runs"}),
    input:
        records=lambda wildcards: WORKLOAD_RECORDS[wildcards.workload](),
        python=env_input("report"),
    params:
        python=run_python,
        script=SCRIPTS / "aggregate.py",
        sweep_keys=lambda wildcards: " ".join(WORKLOAD_SWEEP_KEYS[wildcards.workload]),
    log:
        "results/logs/report/aggregate-{workload}.log",
    conda:
        "../envs/report.yaml"
    shell:
        "{params.python} {params.script} {input.records} --sweep-keys {params.sweep_keys}"
        " --runs {output.runs} --epochs {output.epochs} --environment {output.environment}"
        " --unsuccessful {output.unsuccessful} > {log} 2>&1"


rule plot_mnist:
    output:
        **{
            name.replace("-", "_"): report(f"results/figures/mnist/{name}.png", caption=f"../report/mnist-{name}.rst", category="mnist", subcategory="figures")
            for name in MNIST_FIGURES
        },
    input:
        runs="results/tables/mnist-runs.csv",
        epochs="results/tables/mnist-epochs.csv",
        python=env_input("report"),
    params:
        python=run_python,
        script=SCRIPTS / "plot_mnist.py",
        outdir=lambda wildcards, output: Path(output.throughput).parent,
    log:
        "results/logs/report/plot-mnist.log",
    conda:
        "../envs/report.yaml"
    shell:
        "{params.python} {params.script} --runs {input.runs} --epochs {input.epochs}"
        " --outdir {params.outdir} > {log} 2>&1"


rule plot_imdb:
    output:
        **{
            name.replace("-", "_"): report(f"results/figures/imdb/{name}.png", caption=f"../report/imdb-{name}.rst", category="imdb", subcategory="figures")
            for name in IMDB_FIGURES
        },
        table=report("results/tables/imdb-epoch-time-by-batch-and-workers.csv", caption="../report/imdb-epoch-time-table.rst", category="imdb", subcategory="tables", labels={"table": "mean epoch time by batch size and workers"}),
    input:
        runs="results/tables/imdb-runs.csv",
        epochs="results/tables/imdb-epochs.csv",
        python=env_input("report"),
    params:
        python=run_python,
        script=SCRIPTS / "plot_imdb.py",
        outdir=lambda wildcards, output: Path(output.epoch_time).parent,
        convergence_batch=IMDB["convergence_batch"],
    log:
        "results/logs/report/plot-imdb.log",
    conda:
        "../envs/report.yaml"
    shell:
        "{params.python} {params.script} --runs {input.runs} --epochs {input.epochs} --outdir {params.outdir}"
        " --table {output.table} --convergence-batch {params.convergence_batch} > {log} 2>&1"
