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
    log:
        "results/logs/report/plot-mnist.log",
    conda:
        "../envs/report.yaml"
    shell:
        "{params.python} {params.script} --runs {input.runs} --epochs {input.epochs}"
        " --outdir results/figures/mnist > {log} 2>&1"
