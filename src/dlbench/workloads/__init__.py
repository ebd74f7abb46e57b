"""The training workloads the benchmark knows: the one place they are listed, as plain data (this
module imports nothing; dlbench.definitions loads each listed workload's definition and finds its
run sets by name). The studies that span them (the report, the memory pass, the peak, the
exports) are listed apart, in dlbench.studies, and read what each workload declares for them.

A workload is a line in WORKLOADS and its folder, dlbench/workloads/<workload>/ (rules, code,
captions; nothing outside it names the workload):

- definition.py, what the workflow knows of it, pure (no framework, no data):
    RUN_SETS    its run sets (dlbench.sweep.RunSet): each a grid of runs, their spec type, the
                spec of each row, the initial weights of its model
    FIGURES     figure names: results/figures/<workload>/<name>.png, made by its rules.smk
    TABLES      table names its rules.smk writes besides each run set's tables:
                results/tables/<workload>-<name>.csv
    TARGET      (metric, the key of its target in the config section), or None
    check(config)   what the schema cannot check of its section (raise dlbench.errors.ConfigError;
                    dlbench.sweep checks its strategies, modes and batches)
    RENAMED     (optional) {old key in its section: new key}: an old key stops, naming the new
    RENAMED_VALUES (optional) {key in its section: {old value: new value}}: an old value is taken
                as the new for a release, with a warning naming it (dlbench.config.take_renamed)
  and what the studies read of it (dlbench.studies), each optional, plain data: a workload that
  declares nothing for a study is not in it:
    DATA_RULES  the names of its rules that prepare its data (each with a benchmark: file,
                results/benchmarks/<rule>/...): the findings' "where the time went" counts their
                jobs as its data preparation
    CLAIM_TABLES  the tables the findings' claims read of it (results/tables/<name>.csv, full
                names): inputs of the findings where it is configured
    MEMORY_BATCHES  the batches (per device, one device) at which the memory pass measures its
                training run set (its first), unless memory.batches.<workload> says others
    LARGEST_BATCH_MODEL  (a function of memory.largest_batch.blocks, its big model) the model
                whose largest batch under memory.largest_batch.limit_mb the memory pass searches
                (ChestX-ray's DenseNet); at most one workload declares it
    EXPORTS     {model name: (row, classes)}: its PyTorch models that the onnx study can export,
                each its grid row (besides framework, repeat and its overhead_row(config), the
                point the export trains it at, which it then defines too) and how its outputs
                predict ("argmax": one class; "sign": a label per logit); a third element
                {"run_set": another run set of the workload than its first, "min_opset": (the
                least ONNX opset the model exports at, why)} where needed (IMDB's Transformer)
  It imports downward only (dlbench.sweep, dlbench.spec_types, dlbench.errors, dlbench.frameworks,
  dlbench.flops), never another workload's or study's definition, nor what loads the definitions
  (dlbench.declarations, dlbench.definitions, and dlbench.config, dlbench.specs, dlbench.weights
  above it);
- rules.smk: preparing its data from the raw files, its figures (and any benchmark of its own
  besides the training runs, whose run sets its definition declares in RUN_SETS); included by the
  Snakefile for every workload listed here;
- task.py: the task's part every framework shares (a dlbench.contract.Workload: data,
  metrics), and one module per framework, <module>.py, ending with WORKLOAD = TheClass;
  a run set other than the workload's own (chestxray-loader) is a subpackage (chestxray/loader/);
- data.py, or modules by concept (ChestX-ray: labels.py, images.py, synthetic.py): what its
  scripts/ and task read (raw formats, preparation); scripts/ (its jobs'
  entry points: prepare.py, plot.py), report/ (its figures' captions);
- its section in config.yaml and in schemas/config.schema.yaml.
"""
WORKLOADS = ("mnist", "imdb", "chestxray")
