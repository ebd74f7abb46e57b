# IMDB: real reviews -> Keras-style token sequences; the runs are in runs.smk.


rule prepare_imdb:
    output:
        **{name: update(path) for name, path in IMDB_ARRAYS.items()},
        vocabulary=update(f"{IMDB_DATA}/vocabulary.json"),
        summary=update(f"{IMDB_DATA}/summary.json"),
    input:
        unpack(lambda wildcards: imdb_raw()),
        **script_inputs("prepare_imdb.py"),
        python=env_input("data"),
    params:
        python=run_python,
        source=lambda wildcards, input: [f"--{IMDB['source']['kind'].replace('pypi', 'wheel')}", input[0]],
        outdir=lambda wildcards, output: Path(output.summary).parent,
        vocabulary=IMDB["vocabulary"],
        maxlen=IMDB["maxlen"],
        seed=config["seed"],
    log:
        "results/logs/imdb/prepare.log",
    conda:
        "../envs/data.yaml"
    shell:
        "{params.python:q} {input.script:q} {params.source:q} --outdir {params.outdir:q}"
        " --vocabulary {params.vocabulary} --maxlen {params.maxlen} --seed {params.seed} > {log:q} 2>&1"
