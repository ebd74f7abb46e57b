# ChestX-ray14: NIH labels -> a patient-wise split -> images (the user's, or synthetic) ->
# resized once per image library and format -> decode, loader and DenseNet-121 benchmarks.


rule chestxray_labels:
    output:
        f"{CHESTXRAY_DATA}/labels.csv",
    input:
        unpack(lambda wildcards: chestxray_labels_source()),
        python=env_input("data"),
    params:
        python=run_python,
        prepare=SCRIPTS / "prepare_chestxray.py",
        source=lambda wildcards, input: (
            f"--wheel {input.wheel}" if CHESTXRAY["labels"]["kind"] == "pypi" else f"--nih-dir {CHESTXRAY['labels']['nih_dir']}"
        ),
        split=" ".join(str(CHESTXRAY["split"][s]) for s in ("train", "valid", "test")),
        subset=" ".join(f"--{s} {CHESTXRAY['subset'][s]}" for s in ("train", "valid", "test")),
        seed=config["seed"],
    log:
        "results/logs/chestxray/labels.log",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python} {params.prepare} labels {params.source} --seed {params.seed} --split {params.split}"
        " {params.subset} --out {output} > {log} 2>&1"


rule chestxray_images:
    output:
        manifest=f"{CHESTXRAY_DATA}/images.csv",
    input:
        labels=f"{CHESTXRAY_DATA}/labels.csv",
        python=env_input("data"),
    params:
        python=run_python,
        prepare=SCRIPTS / "prepare_chestxray.py",
        source=(
            f"--synthetic-dir {CHESTXRAY_DATA}/synthetic --seed {config['seed']}"
            if SYNTHETIC_IMAGES
            else f"--images-dir {CHESTXRAY['images_dir']}"
        ),
    threads: workflow.cores
    log:
        "results/logs/chestxray/images.log",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python} {params.prepare} images --labels {input.labels} {params.source}"
        " --threads {threads} --manifest {output.manifest} > {log} 2>&1"


rule preprocess_chestxray:
    output:
        manifest=f"{CHESTXRAY_DATA}/{CHESTXRAY['preprocess']['size']}/{{backend}}-{{format}}.csv",
        images=directory(f"{CHESTXRAY_DATA}/{CHESTXRAY['preprocess']['size']}/{{backend}}-{{format}}"),
        record="results/runs/chestxray-preprocess/{backend}/backend~{backend}_format~{format}.json",
    input:
        manifest=f"{CHESTXRAY_DATA}/images.csv",
        python=lambda wildcards: env_input(IMAGE_BACKENDS[wildcards.backend][0]),
    params:
        python=run_python,
        script=SCRIPTS / "preprocess_chestxray.py",
        reader=lambda wildcards: IMAGE_BACKENDS[wildcards.backend][1],
        size=CHESTXRAY["preprocess"]["size"],
    threads: workflow.cores
    resources:
        training=1,
    log:
        "results/logs/chestxray/preprocess-{backend}-{format}.log",
    conda:
        lambda wildcards: str(ENVS / f"{IMAGE_BACKENDS[wildcards.backend][0]}.yaml")
    shell:
        "{params.python} {params.script} --manifest {input.manifest} --backend {params.reader}"
        " --backend-name {wildcards.backend} --format {wildcards.format} --size {params.size}"
        " --threads {threads} --out-dir {output.images} --out-manifest {output.manifest}"
        " --record {output.record} > {log} 2>&1"


rule decode_chestxray:
    output:
        "results/runs/chestxray-decode/{backend}/backend~{backend}_format~{format}_workers~{workers}.json",
    input:
        manifest=f"{CHESTXRAY_DATA}/{CHESTXRAY['preprocess']['size']}/{{backend}}-{{format}}.csv",
        python=lambda wildcards: env_input(IMAGE_BACKENDS[wildcards.backend][0]),
    params:
        python=run_python,
        script=SCRIPTS / "decode_chestxray.py",
        reader=lambda wildcards: IMAGE_BACKENDS[wildcards.backend][1],
        epochs=CHESTXRAY["benchmark_epochs"],
        seed=config["seed"],
    threads: workflow.cores
    resources:
        training=1,
    log:
        "results/logs/chestxray/decode-{backend}-{format}-{workers}.log",
    conda:
        lambda wildcards: str(ENVS / f"{IMAGE_BACKENDS[wildcards.backend][0]}.yaml")
    shell:
        "{params.python} {params.script} --manifest {input.manifest} --backend {params.reader}"
        " --backend-name {wildcards.backend} --format {wildcards.format} --workers {wildcards.workers}"
        " --epochs {params.epochs} --seed {params.seed} --record {output} > {log} 2>&1"


rule train_chestxray:
    output:
        f"results/runs/chestxray/{{framework}}/{CHESTXRAY_SPACE.wildcard_pattern}.json",
    input:
        labels=f"{CHESTXRAY_DATA}/labels.csv",
        images=TRAIN_IMAGES,
        python=lambda wildcards: env_input(wildcards.framework),
    params:
        python=run_python,
        harness=SCRIPTS / "run_benchmark.py",
        spec=lambda wildcards, input, threads: chestxray_spec(wildcards, input, threads, "chestxray"),
    log:
        f"results/logs/runs/chestxray/{{framework}}/{CHESTXRAY_SPACE.wildcard_pattern}.log",
    threads: workflow.cores
    resources:
        training=1,
    conda:
        "../envs/{framework}.yaml"
    shell:
        "{params.python} {params.harness} --spec {params.spec:q} --out {output} > {log} 2>&1"


rule loader_chestxray:
    output:
        "results/runs/chestxray-loader/{framework}/workers~{workers}_repeat~{repeat}.json",
    input:
        labels=f"{CHESTXRAY_DATA}/labels.csv",
        images=TRAIN_IMAGES,
        python=lambda wildcards: env_input(wildcards.framework),
    params:
        python=run_python,
        harness=SCRIPTS / "run_benchmark.py",
        spec=lambda wildcards, input, threads: chestxray_spec(wildcards, input, threads, "chestxray-loader"),
    log:
        "results/logs/runs/chestxray-loader/{framework}/workers~{workers}_repeat~{repeat}.log",
    threads: workflow.cores
    resources:
        training=1,
    conda:
        "../envs/{framework}.yaml"
    shell:
        "{params.python} {params.harness} --spec {params.spec:q} --out {output} > {log} 2>&1"
