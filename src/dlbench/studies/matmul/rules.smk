# The matmul study (the machine's peak): its runs are in rules/runs.smk (this folder's definition.py gives their grid
# and specs); here, the figures and the model FLOP utilisation of every run set that counts its
# FLOPs (RunSet.flops), against the best framework's peak.
MATMUL_FOLDER = Path(workflow.current_basedir)
COUNTED_SETS = [name for name in RUN_SETS if name != "matmul" and RUN_SETS[name][1].flops]


rule plot_matmul:
    output:
        **figure_outputs("matmul", MATMUL_FOLDER / "report"),
        mfu_table=report("results/tables/matmul-mfu.csv", caption="report/mfu-table.rst", category="matmul",
                         subcategory="tables", labels={"table": "model FLOP utilisation per point"}),
    input:
        **table_inputs("matmul", "runs", "points"),
        counted_runs=[f"results/tables/{name}-runs.csv" for name in COUNTED_SETS],
        counted_points=[f"results/tables/{name}-points.csv" for name in COUNTED_SETS],
        **script_inputs(MATMUL_FOLDER / "scripts" / "plot.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.peak).parent,
    log:
        "results/logs/report/plot-matmul.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs:q} --points {input.points:q}"
        " --counted-runs {input.counted_runs:q} --counted-points {input.counted_points:q}"
        " --outdir {params.outdir:q} --table {output.mfu_table:q} > {log:q} 2>&1"
