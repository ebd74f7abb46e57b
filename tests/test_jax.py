"""The JAX adapter (dlbench.frameworks.jax) and its workload modules, run in the jax environment:
the data-parallel placement, one step on 1 and 2 devices, the parameter counts, the threads and
device count set before JAX starts, the grain loader over the run's one order (read across the
protocol's blocks, evaluation between them), the learning rate set mid-run."""
import json
import subprocess
import textwrap
from dataclasses import replace

import pytest

from conftest import REPO, venv_python
from dlbench.specs import spec_to_json
from specs import smoke_spec

pytestmark = pytest.mark.slow


WORKDIR = REPO  # set to the workflow copy with the smoke data by `in_smoke_data`


@pytest.fixture(autouse=True)
def in_smoke_data(smoke_data):
    global WORKDIR
    WORKDIR = smoke_data



def run_jax(code, tmp_path, helper="", **specs):
    """Run `code` (after PRELUDE and `helper`) in the jax environment with each spec written to
    SPECS[name] (a path); return what it prints as JSON on its last line."""
    paths = {}
    for name, spec in specs.items():
        paths[name] = str(tmp_path / f"{name}.json")
        (tmp_path / f"{name}.json").write_text(spec_to_json(spec))
    script = f"import json\nSPECS = {paths!r}\n" + PRELUDE + helper + textwrap.dedent(code)
    proc = subprocess.run([venv_python("jax"), "-c", script], cwd=WORKDIR, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


PRELUDE = """
from dlbench.frameworks import jax as adapter
from dlbench.frameworks.jax.loaders import Feed
from dlbench.frameworks.jax.step import place_batch
from dlbench.protocol import workload_class
from dlbench.specs import spec_from_dict

def spec_of(name):
    with open(SPECS[name]) as f:
        return spec_from_dict(json.load(f))

def workload(name, build=True):
    spec = spec_of(name)
    placement = adapter.setup(spec, "cpu", 0)
    w = workload_class(spec)(spec, placement, adapter)
    w.build() if build else w.build_model()
    return w
"""


def test_sharding_splits_each_batch_into_contiguous_device_slices_and_replicates_the_state(tmp_path):
    out = run_jax("""
    import numpy as np
    from dlbench.contract import shard
    w = workload("two")
    placement = w.placement
    order = np.arange(w.spec.global_batch)[::-1].copy()
    images, labels = place_batch(placement, (w.images[order], w.labels[order]))
    shards = sorted(images.addressable_shards, key=lambda s: s.device.id)
    same = [bool(np.array_equal(np.asarray(s.data), w.images[shard(order, i, 2)])) for i, s in enumerate(shards)]
    params = w.training.model_state()
    import jax
    replicated = all(x.sharding.is_fully_replicated for x in jax.tree.leaves(params))
    print(json.dumps({"devices": [s.device.id for s in shards], "same": same, "replicated": replicated,
                      "placement": [placement.processes, placement.local_devices],
                      "threads": adapter.describe(placement)["threads"]}))
    """, tmp_path, two=smoke_spec("mnist", "jax", devices=2, strategy="sharding", threads=2))
    assert out["devices"] == [0, 1] and out["same"] == [True, True] and out["replicated"]
    assert out["placement"] == [1, 2]
    assert out["threads"]["jax_num_cpu_devices"] == 2 and out["threads"]["NPROC"] == "2"


def test_one_step_gives_the_same_loss_and_weights_on_one_and_two_devices(tmp_path):
    """The same global batch from the same initial weights: the data-parallel step is the
    single-device step (the gradients of the shards reduced over the mesh)."""
    code = """
    import numpy as np, jax
    w = workload(NAME)
    order = np.arange(128).reshape(1, 128)
    loss = sum(float(w.train_step(b)) for b in w.batches(order, np.ones(1, int)))
    kernel = np.asarray(w.training.model_state()["layers"][0]["kernel"].get_value())
    print(json.dumps({"loss": loss, "kernel": kernel.ravel()[:64].tolist()}))
    """
    one = run_jax(code.replace("NAME", '"one"'), tmp_path,
                  one=smoke_spec("mnist", "jax", batch=128))
    two = run_jax(code.replace("NAME", '"two"'), tmp_path,
                  two=smoke_spec("mnist", "jax", batch=64, devices=2, strategy="sharding"))
    assert abs(one["loss"] - two["loss"]) < 1e-5
    assert max(abs(a - b) for a, b in zip(one["kernel"], two["kernel"])) < 1e-5


def test_parameter_counts(tmp_path):
    out = run_jax("""
    print(json.dumps({name: workload(name, build=False).parameter_count() for name in SPECS}))
    """, tmp_path, small=smoke_spec("mnist", "jax"), large=smoke_spec("mnist", "jax", model="large"),
        imdb=smoke_spec("imdb", "jax"), densenet=smoke_spec("chestxray", "jax"))
    # Flax's LSTM cell has one bias vector per gate, as Keras' (PyTorch: 772,354).
    assert out == {"small": 402_442, "large": 4_104_202, "imdb": 771_842, "densenet": 417_102}  # the smoke preset's DenseNet-21


def test_configure_sets_the_cpu_devices_and_threads_before_jax_starts_and_refuses_after(tmp_path):
    out = run_jax("""
    import os, jax
    spec = spec_of("two")
    adapter.configure(spec)
    gpus = adapter.visible_gpus()  # starts JAX's backends
    devices = len(jax.devices("cpu"))
    try:
        adapter._CONFIGURED.clear()
        adapter.configure(spec)
        refused = False
    except adapter.FrameworkError:
        refused = True
    print(json.dumps({"devices": devices, "gpus": gpus, "nproc": os.environ["NPROC"], "refused": refused}))
    """, tmp_path, two=smoke_spec("mnist", "jax", devices=2, strategy="sharding", threads=1))
    assert out == {"devices": 2, "gpus": 0, "nproc": "1", "refused": True}


def test_the_loader_reads_the_training_round_across_blocks_and_evaluation_rounds_between(tmp_path):
    """A training Feed of one long round (the run's order) read block by block and never to its
    end, an evaluation Feed's rounds read between the blocks: each delivers exactly its
    batches in order, with 0 and 2 workers; nothing of the order loads before its first
    next(), and with workers only grain's buffer ahead of what was read; a round is refused
    while the one before is unread; closing with a round unread returns."""
    out = run_jax("""
    import os, tempfile, time, numpy as np
    spec = spec_of("one")
    placement = adapter.setup(spec, "cpu", 0)
    order = np.arange(120).reshape(40, 3)
    results = {}
    for workers in (0, 2):
        marks = {name: tempfile.mkdtemp(dir=os.path.dirname(SPECS["one"])) for name in ("train", "eval")}
        train = Feed(placement, [40], workers, "train").start(Marked(marks["train"]))
        evaluation = Feed(placement, [2, 2, 2, 2], workers, "eval").start(Marked(marks["eval"]))
        batches = train.round(order)
        time.sleep(0.5)  # workers that did not wait would load now
        early = len(os.listdir(marks["train"]))
        blocks, evals, read = [], [], 0
        for steps, payload in ((3, [100, 101]), (4, [102, 103]), (2, None)):
            blocks.append([next(batches).tolist() for _ in range(steps)])
            read += steps
            if payload is not None:
                evals.append([int(e) for e in evaluation.round(np.array(payload))])
        time.sleep(0.5)  # the workers fill grain's buffers
        ahead = len(os.listdir(marks["train"])) - read
        refused = []
        try:
            train.round(order)  # its one round is given
        except RuntimeError as err:
            refused.append("all given" in str(err))
        partial = evaluation.round(np.array([104, 105]))
        next(partial)
        try:
            evaluation.round(np.array([106, 107]))  # its elements would come after 105
        except RuntimeError as err:
            refused.append("unread" in str(err))
        train.close()
        evaluation.close()
        results[workers] = {"early": early, "blocks": blocks, "evals": evals, "ahead": ahead, "refused": refused}
    print(json.dumps(results))
    """, tmp_path, helper=LOADER_HELPER, one=smoke_spec("mnist", "jax"))
    rows = [[3 * i, 3 * i + 1, 3 * i + 2] for i in range(40)]
    for workers in ("0", "2"):
        got = out[workers]
        assert got["blocks"] == [rows[0:3], rows[3:7], rows[7:9]]
        assert got["evals"] == [[100, 101], [102, 103]]
        assert got["early"] == 0
        assert got["refused"] == [True, True]
    assert out["0"]["ahead"] == 0  # no prefetch in the consuming thread
    assert 1 <= out["2"]["ahead"] <= 4 * 2  # grain's buffers: at most 4 elements per worker (Feed)


# A picklable element loader for the spawned workers: defined in an importable module, as a
# workload module's loaders are (the snippet above runs as __main__, which a worker cannot import).
LOADER_HELPER = """
import sys, types
import cloudpickle
helper = types.ModuleType("jax_test_loader")
exec('''
import os
class Marked:
    def __init__(self, folder):
        self.folder = folder
    def __call__(self, payload, position):
        open(os.path.join(self.folder, str(position)), "w").close()
        return payload[0][position]
''', helper.__dict__)
sys.modules["jax_test_loader"] = helper
Marked = helper.Marked
cloudpickle.register_pickle_by_value(helper)
"""


def test_the_chestxray_loader_delivers_the_orders_batches_with_each_steps_epoch_across_blocks(tmp_path):
    """The protocol's own loop (run_blocks) over the ChestX-ray training loader, 0 and 2 workers:
    the first step alone (no convergence segment), then units of 4 steps over epochs of 4
    steps, so that the epoch changes inside a block; every step gets the batch of its (epoch,
    indices), as TrainBatch makes it directly."""
    code = """
    import numpy as np
    from dlbench.clock import run_blocks, RunClock
    from dlbench.workloads.chestxray.jax import TrainBatch
    w = workload("loader")
    clock = RunClock(w.spec, w.placement, adapter, w, None)
    seen = []
    def step(batch):
        seen.append([np.asarray(x) for x in batch])
        adapter.hold(w.placement, batch)
    w.train_step = step
    run_blocks(w, clock)
    direct = TrainBatch(w.train_paths, w.train_labels, w.spec.seed, w.spec.data.crop)
    same = [all(np.array_equal(a, b) for a, b in zip(got, direct((clock.order, clock.epochs), i)))
            for i, got in enumerate(seen)]
    unread = w.loader.unread
    adapter.teardown(w.placement)
    print(json.dumps({"same": same, "epochs": clock.epochs[:len(seen)].tolist(), "unread": unread,
                      "order": len(clock.order)}))
    """
    for workers in (0, 2):
        spec = smoke_spec("chestxray-loader", "jax", workers=workers)
        spec = replace(spec, measure=replace(spec.measure, min_unit_steps=4, max_unit_steps=4))
        out = run_jax(code, tmp_path, loader=spec)
        assert out["same"] == [True] * 9, workers  # the first step, calibration (4 steps), steady (4)
        assert out["epochs"] == [1, 1, 1, 1, 2, 2, 2, 2, 3]  # 8 images, batches of 2
        assert out["unread"] == out["order"] - 9 > 0  # the order is read only as far as the run went


def test_chestxray_evaluates_between_segments_while_the_training_order_is_open(tmp_path):
    """A ChestX-ray run through the protocol's loop, real input, 0 and 2 workers: two
    convergence segments, each evaluated on the validation images (the evaluation loader's
    planned rounds, not queued behind the training order), then the units and the final test
    evaluation; the same losses and metrics with and without workers."""
    code = """
    from dlbench.clock import run_blocks, RunClock
    from dlbench.result_file import ResultFile
    out = {}
    for name in ("w0", "w2"):
        w = workload(name)
        results = ResultFile(SPECS[name] + ".results.json")
        clock = RunClock(w.spec, w.placement, adapter, w, results)
        run_blocks(w, clock)
        planned = list(w.eval_loader.rounds_left)
        final = w.final_evaluation()
        out[name] = {"segments": [[s["steps"], s["loss"], s["metric"]] for s in results.data["segments"]],
                     "units": [[u["kind"], u["loss"]] for u in results.data["units"]],
                     "left_before_final": planned, "left_after": w.eval_loader.rounds_left,
                     "test_loss": final["test_loss"], "unread": w.loader.unread}
        adapter.teardown(w.placement)
    print(json.dumps(out))
    """
    specs = {}
    for workers in (0, 2):
        spec = smoke_spec("chestxray", "jax", input="real", workers=workers)
        specs[f"w{workers}"] = replace(spec, convergence=replace(spec.convergence, steps=2, eval_every=1))
    out = run_jax(code, tmp_path, **specs)
    for run in out.values():
        assert [steps for steps, _, _ in run["segments"]] == [1, 1]
        assert all("valid_loss" in metric for _, _, metric in run["segments"])
        assert [kind for kind, _ in run["units"]] == ["calibration", "steady"]
        assert len(run["left_before_final"]) == 1 and run["left_after"] == []  # the planned rounds served
        assert run["unread"] > 0
    w0, w2 = out["w0"], out["w2"]
    for a, b in zip(w0["segments"] + w0["units"], w2["segments"] + w2["units"]):
        assert abs(a[1] - b[1]) < 1e-5
    for a, b in zip(w0["segments"], w2["segments"]):
        assert abs(a[2]["valid_loss"] - b[2]["valid_loss"]) < 1e-5
    assert abs(w0["test_loss"] - w2["test_loss"]) < 1e-5


def test_the_learning_rate_set_mid_run_is_the_steps_without_a_new_compilation(tmp_path):
    """IMDB's set_learning_rate between two steps of the run's order: a rate of 0 leaves the
    weights as they were, and the step is not compiled again."""
    out = run_jax("""
    import numpy as np
    from dlbench.clock import Plan, run_order
    w = workload("one")
    order, epochs = run_order(w.n_train, w.spec.global_batch, w.spec.seed,
                              Plan.max_steps(w.spec.measure, w.spec.convergence))
    batches = w.batches(order, epochs)
    w.train_step(next(batches))
    before = np.asarray(w.training.model_state()["classifier"]["kernel"].get_value())
    w.set_learning_rate(0.0)
    w.train_step(next(batches))
    after = np.asarray(w.training.model_state()["classifier"]["kernel"].get_value())
    w.set_learning_rate(1e-3)
    w.train_step(next(batches))
    moved = np.asarray(w.training.model_state()["classifier"]["kernel"].get_value())
    print(json.dumps({"unchanged": bool(np.array_equal(before, after)), "moved": not np.array_equal(after, moved),
                      "compilations": w.training.step._cache_size()}))
    """, tmp_path, one=smoke_spec("imdb", "jax"))
    assert out == {"unchanged": True, "moved": True, "compilations": 1}
