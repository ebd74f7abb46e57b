# IMDB: real reviews -> Keras-style token sequences -> one training run per sweep point.


rule prepare_imdb:
    output:
        **IMDB_ARRAYS,
        vocabulary=f"{IMDB_DATA}/vocabulary.json",
        summary=f"{IMDB_DATA}/summary.json",
    input:
        unpack(lambda wildcards: imdb_raw()),
        python=env_input("data"),
    params:
        python=run_python,
        prepare=SCRIPTS / "prepare_imdb.py",
        source=lambda wildcards, input: f"--{IMDB['source']['kind'].replace('pypi', 'wheel')} {input[0]}",
        outdir=lambda wildcards, output: Path(output.summary).parent,
        vocabulary=IMDB["vocabulary"],
        maxlen=IMDB["maxlen"],
        seed=config["seed"],
    log:
        "results/logs/imdb/prepare.log",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python} {params.prepare} {params.source} --outdir {params.outdir}"
        " --vocabulary {params.vocabulary} --maxlen {params.maxlen} --seed {params.seed} > {log} 2>&1"


rule train_imdb:
    output:
        f"results/runs/imdb/{{framework}}/{IMDB_SPACE.wildcard_pattern}.json",
    input:
        **IMDB_ARRAYS,
        python=lambda wildcards: env_input(wildcards.framework),
    params:
        python=run_python,
        harness=SCRIPTS / "run_benchmark.py",
        spec=imdb_spec,
    log:
        f"results/logs/runs/imdb/{{framework}}/{IMDB_SPACE.wildcard_pattern}.log",
    threads: workflow.cores
    resources:
        training=1,
    conda:
        "../envs/{framework}.yaml"
    shell:
        "{params.python} {params.harness} --spec {params.spec:q} --out {output} > {log} 2>&1"
