"""What every bare loop (benchmarks/bare/<workload>_<framework>.py, the framework without the
harness, for benchmarks/overhead.py) does alike, so that a loop holds only its framework's model,
step and loop:

    spec, epochs, device = bare.start(framework)   the command line SPEC_FILE EPOCHS; the
                                                   framework's threads, float32 policy, seed and device
    clock = bare.EpochClock(samples)               the clock of its epochs (dlbench.clock's):
    clock.start() ... steps, device sync ... clock.stop(epoch)   one JSON line an epoch

and the training split (`training_arrays`, ChestX-ray's `synthetic_sizes`) read as the harness reads it.

    python benchmarks/bare/<workload>_<framework>.py SPEC_FILE EPOCHS
"""
import json
import os
import sys

import numpy as np

from dlbench.clock import now
from dlbench.specs import spec_from_dict


def start(framework):
    """(the spec, the epochs, the device) of the command line SPEC_FILE EPOCHS, the framework set up
    for the spec (FRAMEWORKS)."""
    with open(sys.argv[1]) as f:
        spec = spec_from_dict(json.load(f))
    return spec, int(sys.argv[2]), FRAMEWORKS[framework](spec)


# Each: the run's threads, its float32 policy on GPUs (set by the harness's adapter's own gpu_float32),
# its seed; the device: one, a GPU unless the spec's device is cpu or there is none.

def _pytorch(spec):
    import torch

    from dlbench.frameworks.pytorch import gpu_float32

    torch.set_num_threads(spec.threads)
    gpu_float32(spec.gpu_float32)
    torch.manual_seed(spec.seed)
    return torch.device("cuda" if spec.device_kind != "cpu" and torch.cuda.is_available() else "cpu")


def _tensorflow(spec):
    """The device's name, for tf.device."""
    import keras
    import tensorflow as tf

    from dlbench.frameworks.tensorflow import gpu_float32

    tf.config.threading.set_intra_op_parallelism_threads(spec.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    gpus = tf.config.list_physical_devices("GPU")
    gpu = spec.device_kind != "cpu" and bool(gpus)
    tf.config.set_visible_devices(gpus[:1] if gpu else [], "GPU")
    gpu_float32(spec.gpu_float32)
    keras.utils.set_random_seed(spec.seed)
    return "/gpu:0" if gpu else "/cpu:0"


def _mxnet(spec):
    """The context. MXNet reads its thread settings, and NVIDIA's libraries the float32 policy,
    once, as they load: set before the import."""
    from dlbench.frameworks.mxnet import gpu_float32

    os.environ.update({"OMP_NUM_THREADS": str(spec.threads), "MXNET_CPU_WORKER_NTHREADS": "1"})
    gpu_float32(spec.gpu_float32)
    import mxnet as mx

    ctx = mx.gpu(0) if spec.device_kind != "cpu" and mx.context.num_gpus() > 0 else mx.cpu(0)
    mx.random.seed(spec.seed)
    np.random.seed(spec.seed)
    return ctx


def _jax(spec):
    """JAX's default device. Read once, when JAX starts its backends: XLA's CPU thread pool, and
    the CPU alone if asked. The seed is the loop's own (nnx.Rngs, numpy's generator)."""
    os.environ["NPROC"] = str(spec.threads)
    if spec.device_kind == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    from dlbench.frameworks.jax import gpu_float32

    gpu_float32(spec.gpu_float32)
    return jax.devices()[0]


FRAMEWORKS = {"pytorch": _pytorch, "tensorflow": _tensorflow, "mxnet": _mxnet, "jax": _jax}


class EpochClock:
    """The clock of a bare loop's epochs, dlbench.clock's: start() before an epoch's first step,
    stop(epoch) once the device is synchronised. Each epoch prints one JSON line, which
    benchmarks/overhead.py reads: the epoch, its wall_s, its samples and `fields` (ChestX-ray's:
    the device and input kinds it ran on)."""

    def __init__(self, samples, **fields):
        self.samples, self.fields = samples, fields

    def start(self):
        self.started = now()

    def stop(self, epoch):
        wall_s = now() - self.started
        print(json.dumps({"epoch": epoch, "wall_s": wall_s, "samples": self.samples, **self.fields}), flush=True)


def keras_callback(clock):
    """`clock` around each epoch of Keras' model.fit, the device synchronised before it stops."""
    import keras
    import tensorflow as tf

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            clock.start()

        def on_epoch_end(self, epoch, logs=None):
            if tf.config.list_logical_devices("GPU"):
                tf.test.experimental.sync_devices()
            clock.stop(epoch + 1)

    return EpochTimer()


def training_arrays(spec, *names):
    """The arrays `names` of spec.data (the workload's prepared .npy files) up to its train_limit,
    memory-mapped: the training split the harness trains on."""
    return [np.load(getattr(spec.data, name), mmap_mode="r")[:spec.data.train_limit] for name in names]

