# ChestX-ray14: NIH labels -> a patient-wise split -> images (the user's, or synthetic) ->
# resized once per image library and format (training data, the decode benchmark's images);
# figures. Every timed run (training, the loaders, preprocessing, decoding) is rules/runs.smk's
# (this workload's definition.py gives their grids and specs).
from dlbench.workloads.chestxray.definition import DATA as CHESTXRAY_DATA, LIBRARIES as IMAGE_LIBRARIES, data as chestxray_data
from dlbench.workloads.chestxray.definition import densenet, densenet_name

CHESTXRAY = config["chestxray"]
CHESTXRAY_FOLDER = Path(workflow.current_basedir)
CHESTXRAY_SCRIPTS = CHESTXRAY_FOLDER / "scripts"
if "chestxray" in WORKLOADS and CHESTXRAY["labels"]["kind"] == "pypi":
    add_wheel(CHESTXRAY["labels"])
SYNTHETIC_IMAGES = CHESTXRAY["images_dir"] is None
IMAGE_SOURCE = chestxray_data(config).image_source
DENSENET = densenet_name(densenet(CHESTXRAY["blocks"]))  # DenseNet-121 unless chestxray.blocks says otherwise


rule chestxray_labels:
    output:
        update(f"{CHESTXRAY_DATA}/labels.csv"),
    input:
        unpack(lambda wildcards: {"wheel": wheel_path(CHESTXRAY["labels"])} if CHESTXRAY["labels"]["kind"] == "pypi" else {}),
        **script_inputs(CHESTXRAY_SCRIPTS / "prepare.py"),
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
    benchmark:
        "results/benchmarks/chestxray_labels/labels.tsv"
    conda:
        stack_env_file("data")
    shell:
        "{params.python:q} {input.script:q} labels {params.source:q}"
        " --seed {params.seed} --split {params.split} {params.subset} --out {output:q} > {log:q} 2>&1"


rule chestxray_images:
    output:
        manifest=update(f"{CHESTXRAY_DATA}/images.csv"),
    input:
        labels=f"{CHESTXRAY_DATA}/labels.csv",
        **script_inputs(CHESTXRAY_SCRIPTS / "prepare.py"),
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
    benchmark:
        "results/benchmarks/chestxray_images/images.tsv"
    conda:
        stack_env_file("data")
    shell:
        "{params.python:q} {input.script:q} images --labels {input.labels:q}"
        " {params.source:q} --threads {threads} --manifest {output.manifest:q} > {log:q} 2>&1"


rule preprocess_chestxray:
    output:
        manifest=update(f"{CHESTXRAY_DATA}/{CHESTXRAY['preprocess']['size']}/{{library}}-{{format}}.csv"),
        images=update(directory(f"{CHESTXRAY_DATA}/{CHESTXRAY['preprocess']['size']}/{{library}}-{{format}}")),
    input:
        manifest=f"{CHESTXRAY_DATA}/images.csv",
        **script_inputs(CHESTXRAY_SCRIPTS / "preprocess.py"),
        python=lambda wildcards: env_input(IMAGE_LIBRARIES[wildcards.library].env),
    params:
        python=run_python,
        reader=lambda wildcards: IMAGE_LIBRARIES[wildcards.library].reader,
        size=CHESTXRAY["preprocess"]["size"],
    threads: workflow.cores
    log:
        "results/logs/chestxray/preprocess-{library}-{format}.log",
    benchmark:
        "results/benchmarks/preprocess_chestxray/{library}-{format}.tsv"
    wildcard_constraints:
        library="|".join(IMAGE_LIBRARIES),
        format="jpeg|png",
    conda:
        lambda wildcards: stack_env_file(IMAGE_LIBRARIES[wildcards.library].env)
    shell:
        "{params.python:q} {input.script:q} --manifest {input.manifest:q}"
        " --reader {params.reader} --format {wildcards.format} --size {params.size}"
        " --threads {threads} --out-dir {output.images:q} --out-manifest {output.manifest:q} > {log:q} 2>&1"


rule plot_chestxray:
    output:
        **figure_outputs("chestxray", CHESTXRAY_FOLDER / "report"),
        minutes_table=report("results/tables/chestxray-train-minutes.csv", caption="report/train-minutes-table.rst", category="chestxray", subcategory="tables", labels={"table": "train + validation minutes"}),
        auc_table=report("results/tables/chestxray-test-auc.csv", caption="report/test-auc-table.rst", category="chestxray", subcategory="tables", labels={"table": "test AUC per pathology"}),
        verdict_table=report("results/tables/chestxray-loader-verdict.csv", caption="report/loader-verdict.rst", category="chestxray", subcategory="tables", labels={"table": "which loaders keep a trainer fed"}),
    input:
        **table_inputs("chestxray", "runs", "convergence", "units", "points", "ratios", "utilisation"),
        loader_points="results/tables/chestxray-loader-points.csv",
        preprocess_points="results/tables/chestxray-preprocess-points.csv",
        decode_points="results/tables/chestxray-decode-points.csv",
        **script_inputs(CHESTXRAY_SCRIPTS / "plot.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.auc).parent,
        image_source=IMAGE_SOURCE,
        model=DENSENET,
    log:
        "results/logs/report/plot-chestxray.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs} --convergence {input.convergence:q} --units {input.units:q}"
        " --points {input.points:q} --ratios {input.ratios:q} --utilisation {input.utilisation:q} --loader-points {input.loader_points:q}"
        " --preprocess-points {input.preprocess_points:q} --decode-points {input.decode_points:q}"
        " --outdir {params.outdir} --minutes-table {output.minutes_table} --auc-table {output.auc_table}"
        " --verdict-table {output.verdict_table} --image-source {params.image_source:q} --model {params.model:q} > {log} 2>&1"
