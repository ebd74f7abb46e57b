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
        subject="|".join(map(re.escape, PLAN.folders())) or "(?!)",
        run=r"(?![^/]*_duet~)[a-z_]+~[^/]+",  # a duet's sides: rule train_duet
    threads: THREADS
    resources:
        training=TRAINING,
        # where a scheduler places it (dlbench.plan; mpi: srun starts a run's nodes): ignored on one machine
        nodes=lambda wildcards: planned(wildcards).spec.nodes,
        tasks=lambda wildcards: planned(wildcards).spec.nodes,
        tasks_per_gpu=0,  # SLURM's plugin would otherwise ask for `tasks` tasks per GPU
        cpus_per_task=THREADS,
        gpu=lambda wildcards: PLAN.gpus(planned(wildcards)),
        mem_mb=lambda wildcards: PLAN.memory_mb(planned(wildcards)),
        runtime=lambda wildcards: PLAN.minutes(planned(wildcards)),
        mpi=lambda wildcards: "srun" if planned(wildcards).spec.nodes > 1 else "",
    priority: lambda wildcards: planned(wildcards).priority
    conda:
        lambda wildcards: stack_env_file(planned(wildcards).env)
    # exec: the harness replaces the shell, so that it ends when Snakemake does (see dlbench.harness).
    shell:
        "exec {params.python:q} -m dlbench.harness --spec {params.spec:q}"
        " --out {output:q} {params.lock:q} --attempt {params.attempt:q} > {log:q} 2>&1"


# A duet (config variants, schedule: duet): a variant's run and its framework's at the same point
# and repeat, at the same time, each on half of the job's cores (dlbench.duet holds the lock and
# pins them): one job, two records, each side's log its own.
rule train_duet:
    output:
        framework="results/runs/{run_set}/{subject}/{point}_duet~{variant}_repeat~{repeat}.json",
        variant="results/runs/{run_set}/{subject}/{point}_variant~{variant}_duet~{variant}_repeat~{repeat}.json",
    input:
        unpack(duet_inputs),
    params:
        python=run_python,
        sides=duet_sides,
        lock=LOCK,
    log:
        framework="results/logs/runs/{run_set}/{subject}/{point}_duet~{variant}_repeat~{repeat}.log",
        variant="results/logs/runs/{run_set}/{subject}/{point}_variant~{variant}_duet~{variant}_repeat~{repeat}.log",
    wildcard_constraints:
        run_set="|".join(map(re.escape, RUN_SETS)) or "(?!)",
        point=r"[a-z_]+~(?:(?!_variant~|_duet~)[^/])+",
        variant="|".join(map(re.escape, PLAN.duets)) or "(?!)",
        repeat=r"\d+",
    threads: THREADS
    resources:
        training=TRAINING,
        tasks_per_gpu=0,
        cpus_per_task=THREADS,
        mem_mb=lambda wildcards: 2 * PLAN.memory_mb(planned(duet_side_wildcards(wildcards, "variant"))),
        runtime=lambda wildcards: PLAN.minutes(planned(duet_side_wildcards(wildcards, "variant"))),
    priority: lambda wildcards: planned(duet_side_wildcards(wildcards, "variant")).priority
    conda:
        lambda wildcards: stack_env_file(planned(duet_side_wildcards(wildcards, "framework")).env)
    shell:
        "exec {params.python:q} -m dlbench.duet {params.lock:q} {params.sides:q}"


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
