import pandas as pd
from snakemake.utils import Paramspace

import pytest

from dlbench.errors import ConfigError
from dlbench.frameworks import FRAMEWORKS
from dlbench.sweep import check_modes, run_id
from dlbench.workloads.imdb.definition import COLUMNS as IMDB_COLUMNS, runs as imdb_grid
from dlbench.workloads.mnist.definition import COLUMNS as MNIST_COLUMNS, runs as mnist_grid

MNIST = {
    "models": ["small", "large"],
    "duplicates": [1, 4],
    "batches": [128],
    "devices": [1, 2, 4],
    "nodes": [1],
    "strategies": {"pytorch": ["ddp", "dp"], "tensorflow": ["mirrored"], "mxnet": []},
    "modes": {name: [framework.default_mode] for name, framework in FRAMEWORKS.items()},
    "precisions": ["float32"],
}
REPEATS = 2


def test_one_device_runs_once_without_a_strategy():
    rows = mnist_grid({"mnist": MNIST}, ["pytorch"], REPEATS)
    single = [r for r in rows if r["devices"] == 1]
    assert {r["strategy"] for r in single} == {"none"}
    # 2 models x 2 data sizes x 1 batch x 2 repeats
    assert len(single) == 8


def test_every_strategy_of_a_framework_runs_at_every_device_count_above_one():
    rows = mnist_grid({"mnist": MNIST}, ["pytorch", "tensorflow", "mxnet"], REPEATS)
    points = 2 * 2 * 1 * 2  # models x data sizes x batches x repeats
    count = lambda fw, devices: sum(1 for r in rows if r["framework"] == fw and r["devices"] == devices)
    assert count("pytorch", 2) == count("pytorch", 4) == 2 * points
    assert count("tensorflow", 4) == points
    assert count("mxnet", 2) == 0  # no strategy named, no multi-device run
    assert count("mxnet", 1) == points
    assert len(rows) == len({(r["framework"], run_id(r, MNIST_COLUMNS)) for r in rows})


def test_points_on_several_nodes_run_the_strategies_that_span_nodes_where_the_devices_divide():
    config = {"mnist": {**MNIST, "nodes": [1, 2], "strategies": {"pytorch": ["ddp", "dp"], "tensorflow": ["mirrored", "multiworker"]}}}
    rows = mnist_grid(config, ["pytorch", "tensorflow"], 1)
    on_two = {(r["framework"], r["devices"], r["strategy"]) for r in rows if r["nodes"] == 2}
    # 1 device does not divide over 2 nodes; DataParallel and MirroredStrategy stay in one process
    assert on_two == {(fw, devices, strategy) for fw, strategy in (("pytorch", "ddp"), ("tensorflow", "multiworker"))
                      for devices in (2, 4)}
    assert {r["nodes"] for r in rows if r["devices"] == 1} == {1}


def test_run_id_is_the_paramspace_pattern_and_round_trips():
    rows = mnist_grid({"mnist": MNIST}, ["tensorflow"], REPEATS)
    frame = pd.DataFrame(rows)[list(MNIST_COLUMNS)]
    space = Paramspace(frame, filename_params="*")
    assert space.wildcard_pattern == "_".join(f"{c}~{{{c}}}" for c in MNIST_COLUMNS)
    row = rows[-1]
    assert run_id(row, MNIST_COLUMNS) == ("model~large_duplicate~4_batch~128_devices~4_nodes~1_strategy~mirrored_mode~graph_precision~float32_"
                                             "repeat~2")
    instance = space.instance({c: str(row[c]) for c in MNIST_COLUMNS})
    assert {k: v if isinstance(v, str) else int(v) for k, v in instance.items()} == {c: row[c] for c in MNIST_COLUMNS}


def test_imdb_grid_crosses_batch_workers_and_gradients_sparse_in_pytorch_alone():
    imdb = {"models": ["lstm"], "batches": [64, 256], "workers": [0, 2, 4], "grads": ["dense", "sparse"],
            "modes": MNIST["modes"], "precisions": ["float32"]}
    rows = imdb_grid({"imdb": imdb}, ["pytorch", "mxnet"], 1)
    assert len(rows) == 2 * 3 * (2 + 1)   # batches x workers x (PyTorch's dense and sparse, MXNet's dense)
    # sparse embedding gradients are PyTorch's alone: no other framework gets a sparse point
    assert {r["framework"] for r in rows if r["grad"] == "sparse"} == {"pytorch"}
    assert run_id(rows[0], IMDB_COLUMNS) == "batch~64_workers~0_grad~dense_mode~eager_precision~float32_repeat~1"


def test_every_point_runs_in_each_mode_named_and_a_framework_left_out_in_its_default():
    config = {"mnist": {**MNIST, "devices": [1, 2], "modes": {"pytorch": ["eager", "compile"]}}}
    check_modes(config, "mnist")
    rows = mnist_grid(config, ["pytorch", "mxnet"], 1)
    points = lambda fw, mode: {(r["model"], r["duplicate"], r["devices"], r["strategy"]) for r in rows
                               if r["framework"] == fw and r["mode"] == mode}
    assert points("pytorch", "eager") == points("pytorch", "compile") and len(points("pytorch", "eager")) == 2 * 2 * 3
    assert {r["mode"] for r in rows if r["framework"] == "mxnet"} == {"hybrid"}


@pytest.mark.parametrize("modes, named", [({"pytorch": ["xla"]}, "modes.pytorch: unknown mode 'xla' (pytorch has eager, "),
                                          ({"pytorch": []}, "modes.pytorch: empty"),
                                          ({"torch": ["eager"]}, "modes: unknown framework 'torch'")])
def test_a_mode_the_framework_does_not_have_is_named(modes, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        check_modes({"imdb": {"modes": modes}}, "imdb")
