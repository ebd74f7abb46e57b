"""Keras 3 (dlbench.frameworks.keras) in its three environments: model.fit trains each of the
protocol's blocks on exactly the run's order, one fit epoch per block, across fit calls when
the block length changes, with the learning rate of each step's epoch; nothing of the run
loads before its first clock; on one device and data parallel, with Keras' loader in the
training process and in worker processes; the adapter check.

A probe layer records what fit's train step receives: the steps and, per step, a
position-weighted sum of the batch's sample ids, kept in non-trainable variables (as batch
normalisation keeps its statistics) and read at each block's end; the loads are logged with
their times (from every process: monotonic clocks) and the run's step whose batch they read.
"""
import dataclasses
import json
import subprocess
import textwrap

import pytest

from conftest import REPO, venv_python
from dlbench.clock import Plan, run_order
from dlbench.spec_types import Convergence, Measure
from dlbench.specs import spec_to_json
from specs import smoke_spec

pytestmark = pytest.mark.slow


WORKDIR = REPO  # set to the workflow copy with the smoke data by `in_smoke_data`


@pytest.fixture(autouse=True)
def in_smoke_data(smoke_data):
    global WORKDIR
    WORKDIR = smoke_data


SAMPLES, BATCH = 64, 8
# Blocks of 3 (a convergence segment), then calibration units of 2 and 4 steps (4 is the most:
# no unit reaches the absurd minimum time), a warm-up unit and 2 steady units of 4 (any two
# units agree within the tolerance): 21 steps over the epochs 1 to 3 of 8 steps each, and
# three fit calls, one per length.
MEASURE = Measure(min_unit_seconds=1e9, min_unit_steps=2, max_unit_steps=4, warmup_tolerance=1e9,
                  max_warmup_units=3, steady_units=2, max_other_cpus=0.5, max_contended_reruns=0)
CONVERGENCE = Convergence(steps=3, eval_every=3)
BLOCKS = [("segment", 3), ("calibration", 2), ("calibration", 4), ("warmup", 4), ("steady", 4), ("steady", 4)]

PROBE = """
import json, os, sys, time
import numpy as np
from dlbench.frameworks import keras as adapter
from dlbench.frameworks.keras.step import WorkloadMethods
from dlbench.frameworks.keras.loaders import fit_input, run_batches
from dlbench.clock import RunClock
from dlbench.contract import Workload
from dlbench.specs import spec_from_dict

with open(SPEC) as f:
    spec = spec_from_dict(json.load(f))
adapter.configure(spec)
import keras

placement = adapter.setup(spec, "cpu", 0)
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


class Probed(WorkloadMethods, Workload):
    def load_data(self):
        self.n_train = SAMPLES

    def build_model(self):
        with adapter.scope(self.placement):
            self.probe = Probe()
            self.model = keras.Sequential([keras.Input((1,)), self.probe, keras.layers.Dense(1)])

    def build_training(self):
        self.compile("mse", 0.01, labels=np.zeros((1, 1), np.float32), outputs=np.zeros((1, 1), np.float32))
        self.train_data = run_batches(load, spec.global_batch, WORKERS)

    def load_weights(self, weights):
        pass  # the probe's model, not MNIST's: the shared start of the spec's MNIST model does not apply

    def epoch_info(self, epoch):
        return {"lr": 0.01 / epoch}

    def evaluate(self):
        return {}


class Clock(RunClock):
    def start(self):
        super().start()
        events.append(["start", time.monotonic(), self.upcoming().kind, self.steps_done])

    def stop(self, steps, loss_sum, pending=None):
        events.append(["stop", time.monotonic(), steps,
                       float(keras.ops.convert_to_numpy(workload.probe.steps)),
                       float(keras.ops.convert_to_numpy(workload.probe.signature)),
                       float(keras.ops.convert_to_numpy(workload.model.optimizer.learning_rate))])
        super().stop(steps, loss_sum, pending)


workload = Probed(spec, placement, adapter)
workload.build()
clock = Clock(spec, placement, adapter, workload, None)
workload.fit(clock)
with open(LOG) as f:
    loads = [json.loads(line) for line in f]
print(json.dumps({"events": events, "loads": loads, "main_pid": os.getpid(), "replicas": adapter.replicas(placement),
                  "fit_input": type(fit_input(workload)).__module__}))
"""


def run_probe(framework, tmp_path, workers, devices=1, strategy="none", convergence=CONVERGENCE):
    spec = smoke_spec("mnist", framework, batch=BATCH // devices, devices=devices, strategy=strategy)
    spec = dataclasses.replace(spec, measure=MEASURE, convergence=convergence)
    (tmp_path / "spec.json").write_text(spec_to_json(spec))
    script = (f"SPEC = {str(tmp_path / 'spec.json')!r}\nLOG = {str(tmp_path / 'loads.jsonl')!r}\n"
              f"SAMPLES, WORKERS = {SAMPLES}, {workers}\n" + PROBE)
    proc = subprocess.run([venv_python(framework), "-c", script], cwd=WORKDIR, capture_output=True, text=True,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return spec, json.loads(proc.stdout.strip().splitlines()[-1])


def signature(order, replicas=1):
    """The probe's value after each step: sum over the run's steps s of s * sum_j (j + 1) * id_j
    (under a tf.distribute strategy, of the first replica's slice)."""
    values, total = [], 0
    for step, batch in enumerate(order, start=1):
        part = batch[:len(batch) // replicas]
        total += step * sum((j + 1) * int(i) for j, i in enumerate(part))
        values.append(total)
    return values


def check_blocks(spec, out, loads_before_run=0, blocks=BLOCKS):
    """Every block trains on exactly the run's next steps, in order, with the learning rate of
    the next step's epoch after it; every step's batch is loaded, none before the run's first
    clock but `loads_before_run` (one batch's shapes, a strategy's read-ahead), none trained."""
    order, epochs = run_order(SAMPLES, spec.global_batch, spec.seed, Plan.max_steps(MEASURE, spec.convergence))
    expected = signature(order, out["replicas"] if spec.strategy == "mirrored" else 1)
    starts = [e for e in out["events"] if e[0] == "start"]
    stops = [e for e in out["events"] if e[0] == "stop"]
    assert [(kind, stop[2]) for (_, _, kind, _), stop in zip(starts, stops)] == blocks
    done = 0
    for (_, start, kind, steps_before), (_, stop, steps, probe_steps, probe_signature, lr) in zip(starts, stops):
        assert steps_before == done and start < stop
        done += steps
        assert probe_steps == done, f"{kind}: fit ran {probe_steps} steps in all, the clock counted {done}"
        assert probe_signature == expected[done - 1], f"{kind} block to step {done}: other batches than the order's"
        assert lr == pytest.approx(0.01 / epochs[done]), f"the learning rate after step {done}"
    run_loads = [load for load in out["loads"] if load["t0"] >= starts[0][1]]
    loaded = {tuple(load["indices"]) for load in run_loads}
    assert all(tuple(batch) in loaded for batch in order[:done]), "a step's batch was never loaded in the run"
    assert len(out["loads"]) - len(run_loads) <= loads_before_run
    return out


# keras-tensorflow reads one batch for its tf.data pipeline's shapes before the first fit
LOADS_BEFORE_RUN = {"keras-tensorflow": 1, "keras-jax": 0, "keras-torch": 0}


@pytest.mark.parametrize("framework", ["keras-tensorflow", "keras-jax", "keras-torch"])
@pytest.mark.parametrize("workers", [0, 2])
def test_each_block_trains_on_exactly_the_runs_next_steps(framework, workers, tmp_path):
    spec, out = run_probe(framework, tmp_path, workers)
    check_blocks(spec, out, LOADS_BEFORE_RUN[framework])
    # keras-tensorflow reads a tf.data pipeline, as the TensorFlow modules do (not Keras'
    # from_generator over the PyDataset); the other two read the PyDataset itself
    assert out["fit_input"].startswith("tensorflow") == (framework == "keras-tensorflow"), out["fit_input"]
    pids = {load["pid"] for load in out["loads"]}
    if workers and framework != "keras-tensorflow":
        assert out["main_pid"] not in pids, "the batches load in Keras' worker processes"
    elif not workers:
        assert pids == {out["main_pid"]}


@pytest.mark.parametrize("framework", ["keras-tensorflow", "keras-jax", "keras-torch"])
def test_without_segments_the_first_step_is_a_fit_epoch_of_its_own(framework, tmp_path):
    """No convergence segment: the run's first step (compiling) is a 1-step block, then fit again
    from step 2 with the calibration's lengths (dlbench.clock.Plan)."""
    spec, out = run_probe(framework, tmp_path, 0, convergence=Convergence(steps=0, eval_every=1))
    check_blocks(spec, out, LOADS_BEFORE_RUN[framework], blocks=[("calibration", 1), *BLOCKS[1:]])


@pytest.mark.parametrize("workers", [0, 2])
def test_keras_jax_data_parallel_trains_on_the_protocol_order(workers, tmp_path):
    spec, out = run_probe("keras-jax", tmp_path, workers=workers, devices=2, strategy="data-parallel")
    assert out["replicas"] == 2
    check_blocks(spec, out)


@pytest.mark.parametrize("workers", [0, 2])
def test_keras_tensorflow_mirrored_trains_on_the_protocol_order(workers, tmp_path):
    """Under a strategy Keras' TensorFlow trainer reads a batch before the first block, besides
    the one for the pipeline's shapes, through the distributed dataset's read-ahead (measured: 5
    batches with 0 workers), outside any clock: none of it is trained on."""
    spec, out = run_probe("keras-tensorflow", tmp_path, workers=workers, devices=2, strategy="mirrored")
    assert out["replicas"] == 2
    check_blocks(spec, out, loads_before_run=1 + SAMPLES // BATCH)


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
        from dlbench.frameworks import keras as adapter
        from dlbench.specs import spec_from_dict
        import json
        try:
            adapter.check(spec_from_dict(json.loads({spec_to_json(spec)!r})), "cpu")
        except Exception as err:
            print(type(err).__name__, err)
        """)
    proc = subprocess.run([venv_python("keras-torch"), "-c", code], cwd=WORKDIR, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("FrameworkError") and "KERAS_BACKEND='torch'" in proc.stdout
    assert "envs/keras-jax.yaml" in proc.stdout
