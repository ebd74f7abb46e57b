# IMDB: real reviews -> Keras-style token sequences -> figures; the runs are in rules/runs.smk
# (this workload's definition.py gives their grid and specs).
from dlbench.workloads.imdb.definition import ARRAYS as IMDB_ARRAYS, DATA as IMDB_DATA

IMDB = config["imdb"]
IMDB_FOLDER = Path(workflow.current_basedir)
IMDB_FILES = {"aclimdb": "aclImdb_v1.tar.gz", "npz": "imdb.npz"}
if "imdb" in WORKLOADS:
    if IMDB["source"]["kind"] == "pypi":
        add_wheel(IMDB["source"])
    else:
        RAW_FILES[f"imdb/{IMDB_FILES[IMDB['source']['kind']]}"] = (location("imdb"), IMDB["source"]["file_sha256"] or "")


rule prepare_imdb:
    output:
        **{name: update(path) for name, path in IMDB_ARRAYS.items()},
        vocabulary=update(f"{IMDB_DATA}/vocabulary.json"),
        summary=update(f"{IMDB_DATA}/summary.json"),
    input:
        unpack(lambda wildcards: {"wheel": wheel_path(IMDB["source"])} if IMDB["source"]["kind"] == "pypi"
               else {IMDB["source"]["kind"]: f"results/raw/imdb/{IMDB_FILES[IMDB['source']['kind']]}"}),
        **script_inputs(IMDB_FOLDER / "scripts" / "prepare.py"),
        python=env_input("data"),
    params:
        python=run_python,
        source=lambda wildcards, input: [f"--{IMDB['source']['kind'].replace('pypi', 'wheel')}", input[0]],
        outdir=lambda wildcards, output: Path(output.summary).parent,
        vocabulary=IMDB["vocabulary"],
        maxlen=IMDB["maxlen"],
        seed=config["seed"],
    log:
        "results/logs/imdb/prepare.log",
    benchmark:
        "results/benchmarks/prepare_imdb/prepare.tsv"
    conda:
        stack_env_file("data")
    shell:
        "{params.python:q} {input.script:q} {params.source:q} --outdir {params.outdir:q}"
        " --vocabulary {params.vocabulary} --maxlen {params.maxlen} --seed {params.seed} > {log:q} 2>&1"


rule plot_imdb:
    output:
        **figure_outputs("imdb", IMDB_FOLDER / "report"),
        table=report("results/tables/imdb-epoch-time-by-batch-and-workers.csv", caption="report/epoch-time-table.rst", category="imdb", subcategory="tables", labels={"table": "mean epoch time by batch size and workers"}),
    input:
        **table_inputs("imdb", "runs", "convergence", "units", "points", "ratios"),
        **script_inputs(IMDB_FOLDER / "scripts" / "plot.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.epoch_time).parent,
        convergence_batch=IMDB["convergence_batch"],
    log:
        "results/logs/report/plot-imdb.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs:q} --convergence {input.convergence:q} --units {input.units:q} --outdir {params.outdir:q}"
        " --points {input.points:q} --ratios {input.ratios:q}"
        " --table {output.table} --convergence-batch {params.convergence_batch} > {log} 2>&1"
