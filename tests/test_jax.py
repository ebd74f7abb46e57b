"""The JAX backend (dlbench.frameworks.jax) and its workload modules, run in the jax environment:
the data-parallel placement, one step on 1 and 2 devices, the parameter counts, the threads and
device count set before JAX starts, and the grain loader's rounds."""
import json
import subprocess
import textwrap

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
from dlbench.frameworks import jax as backend
from dlbench.protocol import workload_class
from dlbench.specs import spec_from_dict

def spec_of(name):
    with open(SPECS[name]) as f:
        return spec_from_dict(json.load(f))

def workload(name, build=True):
    spec = spec_of(name)
    placement = backend.setup(spec, "cpu", 0)
    w = workload_class(spec)(spec, placement, backend)
    w.build() if build else w.build_model()
    return w
"""


def test_sharding_splits_each_batch_into_contiguous_device_slices_and_replicates_the_state(tmp_path):
    out = run_jax("""
    import numpy as np
    from dlbench.protocol import shard
    w = workload("two")
    placement = w.placement
    order = np.arange(w.spec.global_batch)[::-1].copy()
    images, labels = backend.place_batch(placement, (w.images[order], w.labels[order]))
    shards = sorted(images.addressable_shards, key=lambda s: s.device.id)
    same = [bool(np.array_equal(np.asarray(s.data), w.images[shard(order, i, 2)])) for i, s in enumerate(shards)]
    params = w.training.model_state()
    import jax
    replicated = all(x.sharding.is_fully_replicated for x in jax.tree.leaves(params))
    print(json.dumps({"devices": [s.device.id for s in shards], "same": same, "replicated": replicated,
                      "placement": [placement.processes, placement.local_devices],
                      "threads": backend.describe(placement)["threads"]}))
    """, tmp_path, two=smoke_spec("mnist", "jax", devices=2, strategy="sharding"))
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
    loss = sum(float(w.train_step(b)) for b in w.batches(1, order))
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
    assert out == {"small": 402_442, "large": 4_104_202, "imdb": 771_842, "densenet": 6_968_206}


def test_configure_sets_the_cpu_devices_and_threads_before_jax_starts_and_refuses_after(tmp_path):
    out = run_jax("""
    import os, jax
    spec = spec_of("two")
    backend.configure(spec)
    gpus = backend.visible_gpus()  # starts the backends
    devices = len(jax.devices("cpu"))
    try:
        backend._CONFIGURED.clear()
        backend.configure(spec)
        refused = False
    except backend.FrameworkError:
        refused = True
    print(json.dumps({"devices": devices, "gpus": gpus, "nproc": os.environ["NPROC"], "refused": refused}))
    """, tmp_path, two=smoke_spec("mnist", "jax", devices=2, strategy="sharding", threads=1))
    assert out == {"devices": 2, "gpus": 0, "nproc": "1", "refused": True}


def test_the_loader_workers_load_a_round_only_once_it_is_read_and_in_order(tmp_path):
    out = run_jax("""
    import os, time, numpy as np
    try:
        import grain  # noqa: F401
    except ImportError:
        print(json.dumps({"skip": "grain is not installed in the jax environment"}))
        raise SystemExit
    spec = spec_of("one")
    placement = backend.setup(spec, "cpu", 0)
    marks = os.path.join(SPECS["one"] + ".marks")
    os.makedirs(marks)
    orders = [np.arange(12).reshape(4, 3), np.arange(12)[::-1].reshape(4, 3).copy()]
    results = {}
    for workers in (0, 2):
        feed = backend.Feed(placement, [4, 4], workers, "test").start(Marked(marks))
        seen = []
        for order in orders:
            elements = feed.round(order)
            time.sleep(0.5)  # workers that did not wait would load now
            early = len(os.listdir(marks))
            seen.append([early, [e.tolist() for e in elements]])
            for name in os.listdir(marks):
                os.remove(os.path.join(marks, name))
        feed.close()
        results[workers] = seen
    print(json.dumps(results))
    """, tmp_path, helper=LOADER_HELPER, one=smoke_spec("mnist", "jax"))
    if "skip" in out:
        pytest.skip(out["skip"])
    assert out["0"] == out["2"]
    assert [early for early, _ in out["2"]] == [0, 0]
    assert out["2"][0][1] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert out["2"][1][1][0] == [11, 10, 9]


# A picklable element loader for the spawned workers: defined in an importable module, as a
# workload module's loaders are (the snippet above runs as __main__, which a worker cannot import).
LOADER_HELPER = """
import sys, types
try:
    import cloudpickle
except ImportError:  # no grain either: the test skips
    cloudpickle = None
helper = types.ModuleType("jax_test_loader")
exec('''
import os
class Marked:
    def __init__(self, folder):
        self.folder = folder
    def __call__(self, order, round_index, position):
        open(os.path.join(self.folder, f"{round_index}-{position}"), "w").close()
        return order[position]
''', helper.__dict__)
sys.modules["jax_test_loader"] = helper
Marked = helper.Marked
if cloudpickle is not None:
    cloudpickle.register_pickle_by_value(helper)
"""


def test_the_learning_rate_set_between_epochs_is_the_steps_without_a_new_compilation(tmp_path):
    out = run_jax("""
    import numpy as np
    w = workload("one")
    order = np.arange(128).reshape(2, 64)
    batches = list(w.batches(1, order))
    w.train_step(batches[0])
    before = np.asarray(w.training.model_state()["layers"][0]["kernel"].get_value())
    w.training.set_learning_rate(0.0)
    w.train_step(batches[1])
    after = np.asarray(w.training.model_state()["layers"][0]["kernel"].get_value())
    print(json.dumps({"unchanged": bool(np.array_equal(before, after)), "compilations": w.training.step._cache_size()}))
    """, tmp_path, one=smoke_spec("mnist", "jax"))
    assert out == {"unchanged": True, "compilations": 1}
