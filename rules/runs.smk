# Every timed run (training, the loaders, the image libraries' benchmarks): one record per
# sweep point, each run by the harness (dlbench.harness) in its framework's environment (or
# its library's, for a run of no framework). Training jobs take every
# core and the `training` resource (capped at 1 in profiles/default): never two at once in
# one invocation; the harness's lock (LOCK) keeps apart those of two invocations
# (rules/common.smk: measurement.runs_at_once lifts both, for tests that measure nothing).


rule train:
    output:
        "results/runs/{run_set}/{subject}/{run}.json",
    input:
        unpack(run_inputs),
    params:
        python=run_python,
        spec=run_spec,
        lock=LOCK,
        attempt=run_attempt,
    log:
        "results/logs/runs/{run_set}/{subject}/{run}.log",
    wildcard_constraints:
        run_set="|".join(map(re.escape, RUN_SETS)) or "(?!)",
        subject="|".join(map(re.escape, {s for names in SUBJECTS.values() for s in names})) or "(?!)",
    threads: THREADS
    resources:
        training=TRAINING,
        # where a scheduler places it (common.smk): ignored on one machine
        nodes=run_nodes,
        tasks=run_nodes,
        tasks_per_gpu=0,  # SLURM's plugin would otherwise ask for `tasks` tasks per GPU
        cpus_per_task=THREADS,
        gpu=run_gpus,
        mem_mb=run_memory_mb,
        runtime=run_minutes,
        mpi=run_launcher,
    priority: run_priority
    conda:
        lambda wildcards: stack_env_file(run_env(wildcards))
    # exec: the harness replaces the shell, so that it ends when Snakemake does (see dlbench.harness).
    shell:
        "exec {params.python:q} -m dlbench.harness --spec {params.spec:q}"
        " --out {output:q} {params.lock:q} --attempt {params.attempt:q} > {log:q} 2>&1"


# After the first `repeats` of every timed point, one round at a time: the points whose
# headline ratios are still open run one more repeat (dlbench.rounds), within max_repeats and
# budget_minutes. A checkpoint: the records it plans are known once it has read those before
# (rules/common.smk, planned_rounds); a finished run plans nothing again.
checkpoint plan_repeats:
    output:
        round_plan("{round}"),
    input:
        records=lambda wildcards: timed_records(until=int(wildcards.round) - 1),
        **script_inputs("plan_repeats.py", modules=["dlbench.rounds"]),
        python=env_input("report"),
    params:
        python=run_python,
        measurement=json.dumps({key: MEASUREMENT[key] for key in (
            "repeats", "max_repeats", "budget_minutes", "same_threshold", "confidence", "resamples",
            "min_unit_seconds", "max_other_cpus")}, sort_keys=True),
        seed=config["seed"],
        frameworks=FRAMEWORKS,
    log:
        "results/logs/repeats/round-{round}.log",
    wildcard_constraints:
        round=r"\d+",
    conda:
        stack_env_file("report")
    shell:
        "{params.python:q} {input.script:q} {input.records:q} --round {wildcards.round}"
        " --measurement {params.measurement:q} --seed {params.seed} --frameworks {params.frameworks:q}"
        " --out {output:q} > {log:q} 2>&1"
