# ChestX-ray14: NIH labels -> a patient-wise split -> images (the user's, or synthetic) ->
# resized once per image library and format (training data) -> the decode benchmark; the
# preprocessing benchmark times resizing apart; training and the framework loader benchmark
# are in runs.smk.


rule chestxray_labels:
    output:
        update(f"{CHESTXRAY_DATA}/labels.csv"),
    input:
        unpack(lambda wildcards: chestxray_labels_source()),
        **script_inputs("prepare_chestxray.py"),
        python=env_input("data"),
    params:
        python=run_python,
        source=lambda wildcards, input: (
            ["--wheel", input.wheel] if CHESTXRAY["labels"]["kind"] == "pypi" else ["--nih-dir", CHESTXRAY["labels"]["nih_dir"]]
        ),
        split=[CHESTXRAY["split"][s] for s in ("train", "valid", "test")],
        subset=[arg for s in ("train", "valid", "test") for arg in (f"--{s}", CHESTXRAY["subset"][s])],
        seed=config["seed"],
    log:
        "results/logs/chestxray/labels.log",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python:q} {input.script:q} labels {params.source:q}"
        " --seed {params.seed} --split {params.split} {params.subset} --out {output:q} > {log:q} 2>&1"


rule chestxray_images:
    output:
        manifest=update(f"{CHESTXRAY_DATA}/images.csv"),
    input:
        labels=f"{CHESTXRAY_DATA}/labels.csv",
        **script_inputs("prepare_chestxray.py"),
        python=env_input("data"),
    params:
        python=run_python,
        source=(
            ["--synthetic-dir", f"{CHESTXRAY_DATA}/synthetic", "--seed", config["seed"]]
            if SYNTHETIC_IMAGES
            else ["--images-dir", CHESTXRAY["images_dir"]]
        ),
    threads: workflow.cores
    log:
        "results/logs/chestxray/images.log",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python:q} {input.script:q} images --labels {input.labels:q}"
        " {params.source:q} --threads {threads} --manifest {output.manifest:q} > {log:q} 2>&1"


rule preprocess_chestxray:
    output:
        manifest=update(f"{CHESTXRAY_DATA}/{CHESTXRAY['preprocess']['size']}/{{backend}}-{{format}}.csv"),
        images=update(directory(f"{CHESTXRAY_DATA}/{CHESTXRAY['preprocess']['size']}/{{backend}}-{{format}}")),
    input:
        manifest=f"{CHESTXRAY_DATA}/images.csv",
        **script_inputs("preprocess_chestxray.py"),
        python=lambda wildcards: env_input(IMAGE_BACKENDS[wildcards.backend][0]),
    params:
        python=run_python,
        reader=lambda wildcards: IMAGE_BACKENDS[wildcards.backend][1],
        size=CHESTXRAY["preprocess"]["size"],
    threads: workflow.cores
    log:
        "results/logs/chestxray/preprocess-{backend}-{format}.log",
    wildcard_constraints:
        backend="pillow-simd|pillow|opencv",
        format="jpeg|png",
    conda:
        lambda wildcards: str(ENVS / f"{IMAGE_BACKENDS[wildcards.backend][0]}.yaml")
    shell:
        "{params.python:q} {input.script:q} prepare --manifest {input.manifest:q}"
        " --backend {params.reader} --format {wildcards.format} --size {params.size}"
        " --threads {threads} --out-dir {output.images:q} --out-manifest {output.manifest:q} > {log:q} 2>&1"


# The timed benchmarks: separate processes per repeat, every repeat 1 before any repeat 2.
rule benchmark_preprocess:
    output:
        "results/runs/chestxray-preprocess/{backend}/backend~{backend}_format~{format}_repeat~{repeat}.json",
    input:
        manifest=f"{CHESTXRAY_DATA}/images.csv",
        **script_inputs("preprocess_chestxray.py"),
        python=lambda wildcards: env_input(IMAGE_BACKENDS[wildcards.backend][0]),
    params:
        python=run_python,
        reader=lambda wildcards: IMAGE_BACKENDS[wildcards.backend][1],
        size=CHESTXRAY["preprocess"]["size"],
        images=CHESTXRAY["benchmark_images"]["preprocess"],
        units=MEASUREMENT["steady_units"],
        seed=config["seed"],
    threads: workflow.cores
    resources:
        training=1,
    priority: lambda wildcards: repeat_priority(int(wildcards.repeat), wildcards.backend)
    log:
        "results/logs/chestxray/benchmark-preprocess-{backend}-{format}-repeat~{repeat}.log",
    wildcard_constraints:
        backend="pillow-simd|pillow|opencv",
        format="jpeg|png",
        repeat=r"\d+",
    conda:
        lambda wildcards: str(ENVS / f"{IMAGE_BACKENDS[wildcards.backend][0]}.yaml")
    shell:
        "{params.python:q} {input.script:q} bench --manifest {input.manifest:q}"
        " --backend {params.reader} --backend-name {wildcards.backend} --format {wildcards.format} --size {params.size}"
        " --threads {threads} --images {params.images} --units {params.units} --seed {params.seed}"
        " --repeat {wildcards.repeat} --record {output:q} > {log:q} 2>&1"


rule decode_chestxray:
    output:
        "results/runs/chestxray-decode/{backend}/backend~{backend}_format~{format}_workers~{workers}_repeat~{repeat}.json",
    input:
        manifest=f"{CHESTXRAY_DATA}/{CHESTXRAY['preprocess']['size']}/{{backend}}-{{format}}.csv",
        **script_inputs("decode_chestxray.py"),
        python=lambda wildcards: env_input(IMAGE_BACKENDS[wildcards.backend][0]),
    params:
        python=run_python,
        reader=lambda wildcards: IMAGE_BACKENDS[wildcards.backend][1],
        images=CHESTXRAY["benchmark_images"]["decode"],
        units=MEASUREMENT["steady_units"],
        seed=config["seed"],
    threads: workflow.cores
    resources:
        training=1,
    priority: lambda wildcards: repeat_priority(int(wildcards.repeat), wildcards.backend)
    log:
        "results/logs/chestxray/decode-{backend}-{format}-{workers}-repeat~{repeat}.log",
    wildcard_constraints:
        backend="pillow-simd|pillow|opencv",
        format="jpeg|png",
        workers=r"\d+",
        repeat=r"\d+",
    conda:
        lambda wildcards: str(ENVS / f"{IMAGE_BACKENDS[wildcards.backend][0]}.yaml")
    shell:
        "{params.python:q} {input.script:q} --manifest {input.manifest:q}"
        " --backend {params.reader} --backend-name {wildcards.backend} --format {wildcards.format}"
        " --workers {wildcards.workers} --images {params.images} --units {params.units} --seed {params.seed}"
        " --repeat {wildcards.repeat} --record {output:q} > {log:q} 2>&1"
