# The peak workload: its runs are in rules/runs.smk (this folder's definition.py gives their grid
# and specs); here, the figures and the model FLOP utilisation of every run set that counts its
# FLOPs (RunSet.flops), against the best framework's peak.
PEAK_FOLDER = Path(workflow.current_basedir)
COUNTED_SETS = [name for name in record_sets() if name != "peak" and RUN_SETS[name][1].flops]


rule plot_peak:
    output:
        **figure_outputs("peak", PEAK_FOLDER / "report"),
        mfu_table=report("results/tables/peak-mfu.csv", caption="report/mfu-table.rst", category="peak",
                         subcategory="tables", labels={"table": "model FLOP utilisation per point"}),
    input:
        **table_inputs("peak", "runs", "points"),
        counted_runs=[f"results/tables/{name}-runs.csv" for name in COUNTED_SETS],
        counted_points=[f"results/tables/{name}-points.csv" for name in COUNTED_SETS],
        **script_inputs(PEAK_FOLDER / "scripts" / "plot.py"),
        python=env_input("report"),
    params:
        python=run_python,
        outdir=lambda wildcards, output: Path(output.peak).parent,
    log:
        "results/logs/report/plot-peak.log",
    conda:
        str(ENVS / "report.yaml")
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs:q} --points {input.points:q}"
        " --counted-runs {input.counted_runs:q} --counted-points {input.counted_points:q}"
        " --outdir {params.outdir:q} --table {output.mfu_table:q} > {log:q} 2>&1"
