# Without --use-conda, the workflow builds one venv per env file from its pip list. The
# venv's folder is named by the file's hash, so an edited env file gets a new venv and the
# jobs that take its interpreter as input run again; unchanged ones are shared.


rule build_venv:
    output:
        f"{VENV_PREFIX}/{{stack}}-{{hash}}/python",
    params:
        env_file=lambda wildcards: ENVS / f"{wildcards.stack}.yaml",
        builder=SCRIPTS / "build_venv.py",
        base_python=sys.executable,
    log:
        "results/logs/envs/{stack}-{hash}.log",
    wildcard_constraints:
        stack=r"[a-z0-9_]+",
        hash=r"[0-9a-f]+",
    localrule: True
    # Runs in the driver's interpreter: this rule makes the software environments.
    run:
        shell("{params.base_python} {params.builder} {params.env_file} $(dirname {output}) > {log} 2>&1")
