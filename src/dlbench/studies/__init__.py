"""The studies the benchmark knows: what spans the training workloads (dlbench.workloads) rather
than being one of them, listed once, as plain data (this module imports nothing; dlbench.definitions
loads each listed study's definition beside the workloads' and finds its run sets by name).

- onnx      each workload's exported PyTorch models (its EXPORTS) run in other runtimes
- matmul    the machine's attainable peak, against which training runs are model FLOP utilisation
- memory    each workload's training runs (its MEMORY_BATCHES) measured for memory, apart from the
            timed runs; the largest batch of the big model one workload declares (LARGEST_BATCH_MODEL)
- findings  the report's first view: the claims (each configured workload's and study's
            CLAIM_TABLES), the code lines, where the time went (each one's DATA_RULES)

A study is a line in STUDIES and its folder, dlbench/studies/<study>/, shaped as a workload's
(dlbench.workloads says what its definition.py, rules.smk, task.py, scripts/ and report/ hold:
RUN_SETS, FIGURES, TABLES, TARGET, check(config); a study may declare DATA_RULES and CLAIM_TABLES
of its own too), and its section in config.yaml and schemas/config.schema.yaml. The config's
`studies` lists those that run (left out: all of them). A study names no workload: it reads what
the configured workloads declare (dlbench.declarations), so that a new workload is in every
study that it declares something for, without an edit to the study. Its definition imports
downward only: dlbench.declarations (the workloads' definitions, loaded) and what a workload's
definition may import; never dlbench.definitions, nor another study's definition.
"""
STUDIES = ("onnx", "matmul", "memory", "findings")
# studies renamed so that one word has one meaning: {old name: new name}
RENAMED = {"survey": "findings"}
