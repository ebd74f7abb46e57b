# ONNX: each PyTorch model trained as its training runs are and exported (ONNX graph, PyTorch
# program, test inputs, PyTorch's outputs); its runs in each runtime are rules/runs.smk's (this
# study's definition.py gives their grid and specs); the runtimes' table and figure.
from dlbench.studies.onnx.definition import DATA as ONNX_DATA, MODELS as ONNX_MODELS, exported as onnx_exported
from dlbench.studies.onnx.definition import export_opset as onnx_export_opset, source_spec as onnx_source_spec

ONNX = config["onnx"]
ONNX_FOLDER = Path(workflow.current_basedir)
ONNX_SCRIPTS = ONNX_FOLDER / "scripts"
ONNX_SOURCES = {model: onnx_source_spec(config, model, THREADS) for model in onnx_exported(config)} if "onnx" in STUDIES else {}


rule onnx_export:
    output:
        onnx=f"{ONNX_DATA}/{{model}}.onnx",
        program=f"{ONNX_DATA}/{{model}}.pt2",
        inputs=f"{ONNX_DATA}/{{model}}-inputs.npy",
        reference=f"{ONNX_DATA}/{{model}}-reference.npy",
    input:
        unpack(lambda wildcards: script_inputs(ONNX_SCRIPTS / "export.py",
                                               [workload_module(ONNX_SOURCES[wildcards.model].run_set, "pytorch")])),
        data=lambda wildcards: spec_data(ONNX_SOURCES[wildcards.model]),
        python=env_input("pytorch"),
    params:
        python=run_python,
        spec=lambda wildcards: spec_to_json(ONNX_SOURCES[wildcards.model]),
        opset=lambda wildcards: onnx_export_opset(config, wildcards.model),  # raised to the model's min_opset
        samples=ONNX["test_samples"],
    wildcard_constraints:
        model="|".join(map(re.escape, ONNX_MODELS)),
    threads: THREADS
    resources:
        training=TRAINING,  # it trains: never beside a timed run
    log:
        "results/logs/onnx/export-{model}.log",
    benchmark:
        "results/benchmarks/onnx_export/{model}.tsv"
    conda:
        stack_env_file("pytorch")
    shell:
        "{params.python:q} {input.script:q} --spec {params.spec:q} --opset {params.opset} --samples {params.samples}"
        " --onnx {output.onnx:q} --program {output.program:q} --inputs {output.inputs:q}"
        " --reference {output.reference:q} > {log:q} 2>&1"


rule plot_onnx:
    output:
        **figure_outputs("onnx", ONNX_FOLDER / "report"),
        runtimes_table=report("results/tables/onnx-runtimes.csv", caption="report/runtimes-table.rst", category="onnx",
                              subcategory="tables", labels={"table": "model x runtime: agreement, throughput, ratio"}),
    input:
        **table_inputs("onnx", "runs", "points", "ratios"),
        **script_inputs(ONNX_SCRIPTS / "plot.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.runtimes).parent,
    log:
        "results/logs/report/plot-onnx.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs:q} --points {input.points:q} --ratios {input.ratios:q}"
        " --outdir {params.outdir:q} --table {output.runtimes_table:q} > {log:q} 2>&1"
