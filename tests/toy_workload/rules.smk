# The toy workload: synthetic data -> a figure; its runs are in rules/runs.smk (this folder's
# definition.py gives their grid and specs).
TOY = config["toy"]
TOY_FOLDER = Path(workflow.current_basedir)


rule prepare_toy:
    output:
        [update(f"results/data/toy/{name}.npy") for name in ("train-x", "train-y", "test-x", "test-y")],
    input:
        **script_inputs(TOY_FOLDER / "scripts" / "prepare.py"),
        python=env_input("data"),
    params:
        python=run_python,
        sizes=[TOY["features"], TOY["train_samples"], TOY["test_samples"]],
        seed=config["seed"],
    log:
        "results/logs/toy/prepare.log",
    benchmark:
        "results/benchmarks/prepare_toy/prepare.tsv"
    conda:
        str(ENVS / "data.yaml")
    shell:
        "{params.python:q} {input.script:q} --outdir results/data/toy --sizes {params.sizes} --seed {params.seed} > {log:q} 2>&1"


rule plot_toy:
    output:
        **figure_outputs("toy", TOY_FOLDER / "report"),
    input:
        **table_inputs("toy", "runs", "points"),
        **script_inputs(TOY_FOLDER / "scripts" / "plot.py"),
        python=env_input("report"),
    params:
        python=run_python,
    log:
        "results/logs/report/plot-toy.log",
    conda:
        str(ENVS / "report.yaml")
    shell:
        "{params.python:q} {input.script:q} {input.runs:q} {input.points:q} {output.throughput:q} > {log:q} 2>&1"
