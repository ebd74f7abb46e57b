"""Expanding a workload's sweep grid from the config into one row per run (pure)."""
import itertools

# Column order is the order of the fields in a run id, e.g.
# model~small_duplicate~1_batch~256_devices~2_strategy~ddp_repeat~1
MNIST_COLUMNS = ("model", "duplicate", "batch", "devices", "strategy", "repeat")
IMDB_COLUMNS = ("batch", "workers", "grad", "repeat")
CHESTXRAY_COLUMNS = ("data", "devices", "strategy", "repeat")
LOADER_COLUMNS = ("workers", "repeat")
SINGLE_DEVICE = "single"


def device_strategies(devices, strategies, framework):
    """One device runs without a data-parallel strategy; N devices once per strategy named."""
    return [SINGLE_DEVICE] if devices == 1 else strategies[framework]


def mnist_runs(mnist, frameworks):
    """Rows {framework, model, duplicate, batch, devices, strategy, repeat} of the MNIST grid."""
    rows = []
    for framework in frameworks:
        for model, times, batch, devices in itertools.product(
            mnist["models"], mnist["duplicates"], mnist["batch_sizes"], mnist["devices"]
        ):
            strategies = device_strategies(devices, mnist["strategies"], framework)
            for strategy, repeat in itertools.product(strategies, range(1, mnist["repeats"] + 1)):
                rows.append({"framework": framework, "model": model, "duplicate": times, "batch": batch,
                             "devices": devices, "strategy": strategy, "repeat": repeat})
    return rows


def imdb_runs(imdb, frameworks):
    """Rows {framework, batch, workers, grad, repeat} of the IMDB grid. Sparse embedding
    gradients are a PyTorch dimension; the other frameworks record them as not applicable."""
    return [
        {"framework": framework, "batch": batch, "workers": workers, "grad": grad, "repeat": repeat}
        for framework in frameworks
        for batch, workers, grad, repeat in itertools.product(
            imdb["batch_sizes"], imdb["workers"], imdb["grads"], range(1, imdb["repeats"] + 1)
        )
    ]


def chestxray_runs(chestxray, frameworks):
    """Rows {framework, data, devices, strategy, repeat}: real files or synthetic tensors, 1 vs N devices."""
    return [
        {"framework": framework, "data": data, "devices": devices, "strategy": strategy, "repeat": repeat}
        for framework in frameworks
        for data, devices in itertools.product(chestxray["data"], chestxray["devices"])
        for strategy in device_strategies(devices, chestxray["strategies"], framework)
        for repeat in range(1, chestxray["repeats"] + 1)
    ]


def loader_runs(workers, frameworks, repeats=1):
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
