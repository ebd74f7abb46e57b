# The memory pass: its runs (each model a measured workload trains, at memory.batches) are
# rules/runs.smk's (this folder's definition.py gives their grid and specs); here, the largest batch of
# the big model a workload declares (ChestX-ray's DenseNet-121) under memory.largest_batch.limit_mb per
# framework and mode (a search, each batch a run of its own), and the pass's tables and figures.
from dlbench.studies.memory.definition import memory_sets, search_template, searched, searches

MEMORY = config["memory"]
MEMORY_FOLDER = Path(workflow.current_basedir)
MEMORY_SEARCHES = searches(config, FRAMEWORKS) if "memory" in STUDIES else []
MEMORY_TEMPLATES = {(framework, mode): search_template(config, framework, mode, THREADS)
                    for framework, mode in MEMORY_SEARCHES}
MEMORY_SETS = memory_sets(config) if "memory" in STUDIES else []
SEARCH_SUMMARY = "results/memory/largest-batch/{framework}/mode~{mode}.json"
# the searched workload's timed points (the memory-saving modes' cost in speed)
MEMORY_SEARCHED = searched(config) if "memory" in STUDIES else None
MEMORY_TIMED = [f"results/tables/{MEMORY_SEARCHED}-points.csv"] if MEMORY_SEARCHED in WORKLOADS else []


rule largest_batch:
    output:
        summary=SEARCH_SUMMARY,
        trials=directory("results/memory/largest-batch/{framework}/mode~{mode}"),
    input:
        # the search's script, its data, the code its runs run, their interpreter
        unpack(lambda wildcards: {
            **script_inputs(MEMORY_FOLDER / "scripts" / "largest_batch.py"),
            "data": spec_data(MEMORY_TEMPLATES[(wildcards.framework, wildcards.mode)]),
            "code": run_code(MEMORY_TEMPLATES[(wildcards.framework, wildcards.mode)]),
            "python": env_input(wildcards.framework),
        }),
    params:
        python=run_python,
        spec=lambda wildcards: spec_to_json(MEMORY_TEMPLATES[(wildcards.framework, wildcards.mode)]),
        limit_mb=MEMORY["largest_batch"]["limit_mb"],
        max_batch=MEMORY["largest_batch"]["max_batch"],
        max_trials=MEMORY["largest_batch"]["max_trials"],
        lock=LOCK,
    wildcard_constraints:
        framework="|".join(map(re.escape, FRAMEWORKS)),
        mode="[a-z-]+",
    threads: THREADS
    resources:
        training=TRAINING,  # its runs train: never beside a timed run
        mem_mb=lambda wildcards: MEMORY["largest_batch"]["limit_mb"] * 2,
        runtime=MEMORY["timeout_minutes"] * MEMORY["largest_batch"]["max_trials"],
    log:
        "results/logs/memory/largest-batch-{framework}-{mode}.log",
    conda:
        lambda wildcards: stack_env_file(wildcards.framework)
    shell:
        "{params.python:q} {input.script:q} --spec {params.spec:q} --limit-mb {params.limit_mb}"
        " --max-batch {params.max_batch} --max-trials {params.max_trials} --trials {output.trials:q}"
        " {params.lock:q} --out {output.summary:q} > {log:q} 2>&1"


rule plot_memory:
    output:
        **figure_outputs("memory", MEMORY_FOLDER / "report"),
        peaks=report("results/tables/memory-peaks.csv", caption="report/peaks-table.rst", category="memory",
                     subcategory="tables", labels={"table": "peak memory per point"}),
        largest=report("results/tables/memory-largest-batch.csv", caption="report/largest-batch-table.rst",
                       category="memory", subcategory="tables", labels={"table": "largest batch under the limit"}),
        saving=report("results/tables/memory-saving.csv", caption="report/saving-table.rst", category="memory",
                      subcategory="tables", labels={"table": "memory-saving modes"}),
        ratios=report("results/tables/memory-ratios.csv", caption="report/ratios-table.rst", category="memory",
                      subcategory="tables", labels={"table": "ratios of peaks, with intervals"}),
    input:
        runs=[f"results/tables/{name}-runs.csv" for name in MEMORY_SETS],
        searches=[SEARCH_SUMMARY.format(framework=framework, mode=mode) for framework, mode in MEMORY_SEARCHES],
        timed=MEMORY_TIMED,
        **script_inputs(MEMORY_FOLDER / "scripts" / "plot.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.peak_memory).parent,
        limit_mb=MEMORY["largest_batch"]["limit_mb"],
        searched=["--searched", MEMORY_SEARCHED] if MEMORY_SEARCHED else [],
    log:
        "results/logs/report/plot-memory.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs:q} --searches {input.searches:q}"
        " --timed {input.timed:q} {params.searched:q} --limit-mb {params.limit_mb} --outdir {params.outdir:q}"
        " --peaks {output.peaks:q} --largest {output.largest:q} --saving {output.saving:q}"
        " --ratios {output.ratios:q} > {log:q} 2>&1"
