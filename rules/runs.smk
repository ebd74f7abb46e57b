# Every timed run (training, the loaders, the image libraries' benchmarks): one record per
# sweep point, each run by the harness (dlbench.harness) in its framework's environment (or
# its library's, for a run of no framework). Training jobs take every
# core and the `training` resource (capped at 1 in profiles/default): never two at once in
# one invocation; the harness's lock (TRAINING_LOCK) keeps apart those of two invocations.


rule train:
    output:
        "results/runs/{workload}/{subject}/{run}.json",
    input:
        unpack(run_inputs),
    params:
        python=run_python,
        spec=run_spec,
        lock=TRAINING_LOCK,
        attempt=run_attempt,
    log:
        "results/logs/runs/{workload}/{subject}/{run}.log",
    wildcard_constraints:
        workload="|".join(map(re.escape, RUN_SETS)) or "(?!)",
        subject="|".join(map(re.escape, {s for names in SUBJECTS.values() for s in names})) or "(?!)",
    threads: workflow.cores
    resources:
        training=1,
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
        " --out {output:q} --lock {params.lock:q} --attempt {params.attempt:q} > {log:q} 2>&1"
