# Without --use-conda, the workflow builds one venv per env file from its pip list. The
# venv's folder is named by the file's hash, so an edited env file gets a new venv and the
# jobs that take its interpreter as input run again; unchanged ones are shared, also by a
# second Snakemake installation (nothing here depends on the driver's own path).


rule build_venv:
    output:
        local(f"{VENV_PREFIX}/{{stack}}-{{hash}}/python"),
    params:
        env_file=lambda wildcards: workflow_path(stack_env_file(wildcards.stack)),
    log:
        "results/logs/envs/{stack}-{hash}.log",
    benchmark:
        "results/benchmarks/build_venv/{stack}-{hash}.tsv"
    wildcard_constraints:
        stack=r"[a-z0-9_-]+",
        hash=r"[0-9a-f]+",
    localrule: True
    # Runs in the driver's interpreter: this rule makes the software environments.
    run:
        shell(
            "{sys.executable:q} {builder:q} {params.env_file:q}"
            " {venv:q} > {log:q} 2>&1",
            venv=str(Path(output[0]).parent),
            builder=str(SCRIPTS / "build_venv.py"),
        )
