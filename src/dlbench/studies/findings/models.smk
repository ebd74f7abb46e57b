# A workload's other model against its own on the same data (IMDB's Transformer against its LSTM),
# framework by framework: scripts/models.py, from the two run sets' tables; the first view says it.
from dlbench.studies.findings.definition import model_pairs

# other:own:sample of each pair whose both run sets this run trains
MODEL_PAIRS = [f"{other}:{own}:{sample}" for other, own, sample in model_pairs(WORKLOADS)
               if other in TIMED_SETS and own in TIMED_SETS]


rule findings_models:
    output:
        table=report("results/tables/findings-models.csv", caption="report/models.rst", category="findings",
                     labels={"table": "each model against the workload's own"}),
        figure=report("results/figures/findings/models.png", caption="report/models.rst", category="findings",
                      labels={"figure": "each model against the workload's own"}),
    input:
        tables=[f"results/tables/{name}-{table}.csv" for pair in MODEL_PAIRS for name in pair.split(":")[:2]
                for table in ("points", "units", "runs")],
        **script_inputs(Path(workflow.current_basedir) / "scripts" / "models.py"),
        python=env_input("report"),
    params:
        python=run_python,
        pairs=MODEL_PAIRS,
        confidence=MEASUREMENT["confidence"],
        resamples=MEASUREMENT["resamples"],
        seed=config["seed"],
    log:
        "results/logs/report/findings-models.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} --tables-dir results/tables --pairs {params.pairs:q}"
        " --confidence {params.confidence} --resamples {params.resamples} --seed {params.seed}"
        " --table {output.table:q} --figure {output.figure:q} > {log:q} 2>&1"
