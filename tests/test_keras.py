"""Keras 3 (dlbench.frameworks.keras) in its three environments: model.fit trains each epoch on
exactly the protocol's order, with no loading outside the epoch's clock, on one device and data
parallel, with Keras' loader in the training process and in worker processes; the backend check.

A probe layer records what fit's train step receives: the steps and, per step, a
position-weighted sum of the batch's sample ids, kept in non-trainable variables (as batch
normalisation keeps its statistics) and read at each epoch's end; the PyDataset's loads are
logged with their times (from every process: monotonic clocks) and the epoch whose order they
read.
"""
import dataclasses
import json
import subprocess
import textwrap

import pytest

from conftest import REPO, venv_python
from dlbench.protocol import epoch_order
from dlbench.specs import spec_to_json
from specs import smoke_spec

pytestmark = pytest.mark.slow


WORKDIR = REPO  # set to the workflow copy with the smoke data by `in_smoke_data`


@pytest.fixture(autouse=True)
def in_smoke_data(smoke_data):
    global WORKDIR
    WORKDIR = smoke_data


SAMPLES, BATCH, EPOCHS = 64, 8, 3

PROBE = """
import json, os, sys, time
import numpy as np
from dlbench.frameworks import keras as backend
from dlbench.protocol import EpochClock, Workload
from dlbench.specs import spec_from_dict

with open(SPEC) as f:
    spec = spec_from_dict(json.load(f))
backend.configure(spec)
import keras

placement = backend.setup(spec, "cpu", 0)
events = []


class Probe(keras.layers.Layer):
    \"\"\"Passes its input (the sample ids) through; in training, counts the steps and adds
    step * sum_j (j + 1) * id_j of the batch (the replica's part under a tf.distribute strategy).\"\"\"

    def build(self, input_shape):
        kw = dict(shape=(), initializer="zeros", trainable=False, aggregation="only_first_replica")
        self.steps = self.add_weight(name="steps", **kw)
        self.signature = self.add_weight(name="signature", **kw)

    def call(self, ids, training=False):
        if training:
            step = self.steps + 1.0
            positions = keras.ops.cumsum(keras.ops.ones_like(ids[:, 0]))
            self.steps.assign(step)
            self.signature.assign(self.signature + step * keras.ops.sum(ids[:, 0] * positions))
        return ids


def load(epoch, indices):
    t0 = time.monotonic()
    batch = ids[indices], targets[indices]
    with open(LOG, "a") as f:
        f.write(json.dumps({"epoch": epoch, "indices": indices.tolist(), "t0": t0, "t1": time.monotonic(),
                            "pid": os.getpid()}) + "\\n")
    return batch


ids = np.arange(SAMPLES, dtype=np.float32)[:, None]
targets = np.zeros((SAMPLES, 1), np.float32)


class Probed(backend.FitMethods, Workload):
    def load_data(self):
        self.n_train = SAMPLES

    def build_model(self):
        with backend.scope(self.placement):
            self.probe = Probe()
            self.model = keras.Sequential([keras.Input((1,)), self.probe, keras.layers.Dense(1)])

    def build_training(self):
        self.compile("mse", 0.01, labels=np.zeros((1, 1), np.float32), outputs=np.zeros((1, 1), np.float32))
        self.train_data = backend.epoch_batches(load, SAMPLES // spec.global_batch, spec.global_batch, WORKERS)

    def load_weights(self, weights):
        pass  # the probe's model, not MNIST's: the shared start of the spec's MNIST model does not apply

    def epoch_info(self, epoch):
        return {"lr": 0.01 / epoch}

    def evaluate(self):
        return {}


class Clock(EpochClock):
    def begin(self, epoch):
        events.append(["begin", epoch, time.monotonic()])
        return super().begin(epoch)

    def start(self):
        super().start()
        events.append(["start", self.epoch, time.monotonic(), self.order.tolist()])

    def stop(self, steps, loss_sum, pending=None):
        events.append(["stop", self.epoch, time.monotonic(), steps,
                       float(keras.ops.convert_to_numpy(workload.probe.steps)),
                       float(keras.ops.convert_to_numpy(workload.probe.signature)),
                       float(keras.ops.convert_to_numpy(workload.model.optimizer.learning_rate))])
        super().stop(steps, loss_sum, pending)


workload = Probed(spec, placement, backend)
events.append(["build", 0, time.monotonic()])
workload.build()
clock = Clock(spec, placement, backend, workload, None)
workload.fit(clock)
with open(LOG) as f:
    loads = [json.loads(line) for line in f]
print(json.dumps({"events": events, "loads": loads, "main_pid": os.getpid(), "replicas": backend.replicas(placement)}))
"""


def run_probe(framework, tmp_path, workers, devices=1, strategy="single"):
    spec = smoke_spec("mnist", framework, batch=BATCH // devices, devices=devices, strategy=strategy)
    spec = dataclasses.replace(spec, epochs=EPOCHS)
    (tmp_path / "spec.json").write_text(spec_to_json(spec))
    script = (f"SPEC = {str(tmp_path / 'spec.json')!r}\nLOG = {str(tmp_path / 'loads.jsonl')!r}\n"
              f"SAMPLES, WORKERS = {SAMPLES}, {workers}\n" + PROBE)
    proc = subprocess.run([venv_python(framework), "-c", script], cwd=WORKDIR, capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return spec, json.loads(proc.stdout.strip().splitlines()[-1])


def signature(orders, replicas=1):
    """The probe's value after each epoch: sum over the run's steps s of s * sum_j (j + 1) * id_j
    (under a tf.distribute strategy, of the first replica's slice)."""
    values, total, step = [], 0, 0
    for order in orders:
        for batch in order:
            step += 1
            part = batch[:len(batch) // replicas]
            total += step * sum((j + 1) * int(i) for j, i in enumerate(part))
        values.append(total)
    return values


def check_epochs(spec, out, stand_in_loads=0):
    """Every epoch trains on exactly clock.begin(epoch)'s order, in order; its batches load
    between its clock's start and stop, each once; before the first epoch at most
    `stand_in_loads` loads of the stand-in order, none after."""
    events = {(kind, epoch): rest for kind, epoch, *rest in out["events"]}
    orders = [epoch_order(SAMPLES, spec.global_batch, spec.seed, e) for e in range(1, EPOCHS + 1)]
    expected = signature(orders, out["replicas"] if spec.strategy == "mirrored" else 1)
    for epoch, order in enumerate(orders, start=1):
        start, clock_order = events[("start", epoch)]
        stop, steps, probe_steps, probe_signature, lr = events[("stop", epoch)]
        assert clock_order == order.tolist()
        assert steps == len(order) and probe_steps == epoch * len(order)
        assert probe_signature == expected[epoch - 1], f"epoch {epoch}: the steps saw other batches than its order"
        assert lr == pytest.approx(0.01 / epoch)
        loads = [load for load in out["loads"] if load["epoch"] == epoch]
        assert sorted(load["indices"] for load in loads) == sorted(order.tolist()), f"epoch {epoch}: loads"
        assert all(start <= load["t0"] and load["t1"] <= stop for load in loads), \
            f"epoch {epoch}: a batch loaded outside the clock ({start:.3f}..{stop:.3f}): " \
            f"{[(round(x['t0'], 3), round(x['t1'], 3)) for x in loads if not start <= x['t0'] <= x['t1'] <= stop]}"
    stand_in = [load for load in out["loads"] if load["epoch"] == 0]
    assert len(stand_in) <= stand_in_loads
    assert all(load["t1"] <= events[("begin", 1)][0] for load in stand_in)
    return out


# keras-tensorflow reads the first two items once, for tf.data's signature (outside any clock)
SIGNATURE_PROBE = {"keras-tensorflow": 2, "keras-jax": 0, "keras-torch": 0}


@pytest.mark.parametrize("framework", ["keras-tensorflow", "keras-jax", "keras-torch"])
@pytest.mark.parametrize("workers", [0, 2])
def test_each_epoch_trains_on_exactly_its_order_and_loads_inside_its_clock(framework, workers, tmp_path):
    spec, out = run_probe(framework, tmp_path, workers)
    check_epochs(spec, out, SIGNATURE_PROBE[framework])
    pids = {load["pid"] for load in out["loads"] if load["epoch"] > 0}
    if workers:
        assert out["main_pid"] not in pids, "the batches load in Keras' worker processes"
    else:
        assert pids == {out["main_pid"]}


@pytest.mark.parametrize("workers", [0, 2])
def test_keras_jax_data_parallel_trains_on_the_protocol_order(workers, tmp_path):
    spec, out = run_probe("keras-jax", tmp_path, workers=workers, devices=2, strategy="data-parallel")
    assert out["replicas"] == 2
    check_epochs(spec, out)


@pytest.mark.parametrize("workers", [0, 2])
def test_keras_tensorflow_mirrored_trains_on_the_protocol_order(workers, tmp_path):
    """Under a strategy Keras' TensorFlow trainer reads a batch before the first epoch, besides
    the two of tf.data's signature: its iterator (tf.data's prefetch, or Keras' enqueuer) loads
    up to an epoch of the stand-in order then, outside any clock, and none of it is trained on."""
    spec, out = run_probe("keras-tensorflow", tmp_path, workers=workers, devices=2, strategy="mirrored")
    assert out["replicas"] == 2
    check_epochs(spec, out, stand_in_loads=2 + SAMPLES // BATCH)


def test_keras_torch_has_no_data_parallel_strategy(tmp_path):
    spec = smoke_spec("mnist", "keras-torch", devices=2, strategy="data-parallel")
    proc = subprocess.run([venv_python("keras-torch"), "-m", "dlbench.harness", "--spec", spec_to_json(spec),
                           "--out", str(tmp_path / "record.json")], cwd=WORKDIR, capture_output=True, text=True,
                          check=False)
    record = json.loads((tmp_path / "record.json").read_text())
    assert record["status"] == "not_applicable", proc.stderr[-2000:]
    assert "torch" in record["error"] and "one device" in record["error"]


def test_an_env_whose_keras_backend_is_another_stops_naming_keras_backend(tmp_path):
    spec = smoke_spec("mnist", "keras-jax")
    code = textwrap.dedent(f"""
        from dlbench.frameworks import keras as backend
        from dlbench.specs import spec_from_dict
        import json
        try:
            backend.check(spec_from_dict(json.loads({spec_to_json(spec)!r})), "cpu")
        except Exception as err:
            print(type(err).__name__, err)
        """)
    proc = subprocess.run([venv_python("keras-torch"), "-c", code], cwd=WORKDIR, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("FrameworkError") and "KERAS_BACKEND='torch'" in proc.stdout
    assert "envs/keras-jax.yaml" in proc.stdout
