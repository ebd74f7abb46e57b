"""A workload's sweep grid from the config: one row per run, and each run's typed spec (pure)."""
import itertools

from dlbench.specs import (DENSENET121, Adam, ChestXrayData, ChestXrayLoaderSpec, ChestXraySpec, Convergence, ImdbData,
                           ImdbSpec, LstmModel, Measure, MnistData, MnistModel, MnistSpec, StepSchedule)

# Column order is the order of the fields in a run id, e.g.
# model~small_duplicate~1_batch~256_devices~2_strategy~ddp_repeat~1
MNIST_COLUMNS = ("model", "duplicate", "batch", "devices", "strategy", "repeat")
IMDB_COLUMNS = ("batch", "workers", "grad", "repeat")
CHESTXRAY_COLUMNS = ("input", "devices", "strategy", "repeat")
LOADER_COLUMNS = ("workers", "repeat")
SINGLE_DEVICE = "single"


def device_strategies(devices, strategies, framework):
    """One device runs without a data-parallel strategy; N devices once per strategy named."""
    return [SINGLE_DEVICE] if devices == 1 else strategies[framework]


def mnist_runs(mnist, frameworks, repeats):
    """Rows {framework, model, duplicate, batch, devices, strategy, repeat} of the MNIST grid."""
    rows = []
    for framework in frameworks:
        for model, times, batch, devices in itertools.product(
            mnist["models"], mnist["duplicates"], mnist["batch_sizes"], mnist["devices"]
        ):
            strategies = device_strategies(devices, mnist["strategies"], framework)
            for strategy, repeat in itertools.product(strategies, range(1, repeats + 1)):
                rows.append({"framework": framework, "model": model, "duplicate": times, "batch": batch,
                             "devices": devices, "strategy": strategy, "repeat": repeat})
    return rows


def imdb_runs(imdb, frameworks, repeats):
    """Rows {framework, batch, workers, grad, repeat} of the IMDB grid. Sparse embedding
    gradients are a PyTorch dimension; the other frameworks record them as not applicable."""
    return [
        {"framework": framework, "batch": batch, "workers": workers, "grad": grad, "repeat": repeat}
        for framework in frameworks
        for batch, workers, grad, repeat in itertools.product(
            imdb["batch_sizes"], imdb["workers"], imdb["grads"], range(1, repeats + 1)
        )
    ]


def chestxray_runs(chestxray, frameworks, repeats):
    """Rows {framework, input, devices, strategy, repeat}: real files or synthetic tensors, 1 vs N devices."""
    return [
        {"framework": framework, "input": kind, "devices": devices, "strategy": strategy, "repeat": repeat}
        for framework in frameworks
        for kind, devices in itertools.product(chestxray["inputs"], chestxray["devices"])
        for strategy in device_strategies(devices, chestxray["strategies"], framework)
        for repeat in range(1, repeats + 1)
    ]


def loader_runs(workers, frameworks, repeats):
    """Rows {framework, workers, repeat} of a loader benchmark (a framework or an image library)."""
    return [
        {"framework": framework, "workers": count, "repeat": repeat}
        for framework in frameworks
        for count in workers
        for repeat in range(1, repeats + 1)
    ]


def run_id(row, columns):
    """The sweep point readable in a name, in Snakemake Paramspace's key~value_key~value form."""
    return "_".join(f"{column}~{row[column]}" for column in columns)


# --- specs -----------------------------------------------------------------------------------------
# Paths are relative to the workflow's folder, where every job runs; the rules take the
# same paths as inputs.

MNIST_DATA = "results/data/mnist"
IMDB_DATA = "results/data/imdb"
CHESTXRAY_DATA = "results/data/chestxray"


MEASURE_KEYS = ("min_unit_seconds", "min_unit_steps", "max_unit_steps", "warmup_tolerance", "max_warmup_units",
                "steady_units")


def _run(config, workload, row, columns, threads, convergence=Convergence(0, 1), **fixed):
    """The fields every spec has, from the config, a grid row and the job's threads."""
    section = config[workload.split("-")[0]]
    fields = {"devices": 1, "strategy": SINGLE_DEVICE, **{k: row[k] for k in ("devices", "strategy") if k in row}}
    fields.update(fixed)
    measure = Measure(**{k: config["measurement"][k] for k in MEASURE_KEYS})
    return dict(workload=workload, framework=row["framework"], run_id=run_id(row, columns), repeat=row["repeat"],
                seed=config["seed"], device=config["device"], threads=threads, measure=measure,
                convergence=convergence, timeout_s=float(section["timeout_minutes"] * 60),
                numerics=config["numerics"]["denormals"], **fields)


def _convergence(section):
    return Convergence(steps=section["convergence_steps"], eval_every=section["eval_every_steps"])


MNIST_TRAIN_IMAGES = 60_000


def mnist_spec(config, row, threads):
    mnist = config["mnist"]
    model, times = row["model"], row["duplicate"]
    data = MnistData(train_images=f"{MNIST_DATA}/train-x{times}-images.npy",
                     train_labels=f"{MNIST_DATA}/train-x{times}-labels.npy",
                     test_images=f"{MNIST_DATA}/test-images.npy", test_labels=f"{MNIST_DATA}/test-labels.npy",
                     train_limit=mnist["train_images"].get(model), test_limit=mnist["test_images"].get(model))
    # The study's first and second epoch: convergence in epochs of this point's training set.
    epoch_steps = (data.train_limit or MNIST_TRAIN_IMAGES * times) // (row["batch"] * row.get("devices", 1))
    convergence = Convergence(steps=mnist["convergence_epochs"] * epoch_steps, eval_every=max(1, epoch_steps))
    return MnistSpec(**_run(config, "mnist", row, MNIST_COLUMNS, threads, convergence, batch=row["batch"]),
                     model=MnistModel(model), duplicate=times, optimizer=Adam(**mnist["optimizer"]), data=data)


IMDB_ARRAYS = {f"{split}_{kind}": f"{IMDB_DATA}/{split}-{kind}.npy"
               for split in ("train", "test") for kind in ("sequences", "labels")}


def imdb_spec(config, row, threads):
    imdb = config["imdb"]
    adam = {k: imdb["optimizer"][k] for k in ("lr", "beta1", "beta2", "eps")}
    return ImdbSpec(
        **_run(config, "imdb", row, IMDB_COLUMNS, threads, _convergence(imdb), batch=row["batch"]),
        model=LstmModel(vocabulary=imdb["vocabulary"], embedding=imdb["embedding"], hidden=imdb["hidden"],
                        maxlen=imdb["maxlen"], classes=2),
        workers=row["workers"], grad=row["grad"], optimizer=Adam(**adam),
        schedule=StepSchedule(factor=imdb["optimizer"]["lr_factor"], every_epochs=imdb["optimizer"]["lr_step_epochs"]),
        data=ImdbData(**IMDB_ARRAYS, train_limit=imdb["train_reviews"], test_limit=imdb["test_reviews"]))


def chestxray_data(config):
    """What ChestX-ray training and the framework loaders read: pillow-simd's preprocessed files."""
    chestxray = config["chestxray"]
    size, fmt = chestxray["preprocess"]["size"], chestxray["train_format"]
    return ChestXrayData(labels=f"{CHESTXRAY_DATA}/labels.csv",
                         images=f"{CHESTXRAY_DATA}/{size}/pillow-simd-{fmt}.csv",
                         image_source="synthetic images" if chestxray["images_dir"] is None else "NIH images",
                         size=size, crop=224)


def chestxray_spec(config, row, threads):
    chestxray = config["chestxray"]
    return ChestXraySpec(
        **_run(config, "chestxray", row, CHESTXRAY_COLUMNS, threads, _convergence(chestxray),
               batch=chestxray["batch_size"]),
        model=DENSENET121, input=row["input"], workers=chestxray["workers"],
        optimizer=Adam(**chestxray["optimizer"]), weights=chestxray["weights"][row["framework"]],
        data=chestxray_data(config))


def chestxray_loader_spec(config, row, threads):
    chestxray = config["chestxray"]
    return ChestXrayLoaderSpec(
        **_run(config, "chestxray-loader", row, LOADER_COLUMNS, threads, batch=chestxray["batch_size"]),
        workers=row["workers"], images=chestxray["benchmark_images"]["loader"], data=chestxray_data(config))
