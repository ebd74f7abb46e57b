"""ChestX-ray DenseNet-121 in plain TensorFlow/Keras, as a tutorial writes the loop (TensorFlow's
"training loop from scratch": a tf.function step of GradientTape and the optimizer, called per
batch): the benchmark's model, batch, threads, optimizer, float32 policy and epochs on one
device (the first GPU unless the spec's device is cpu), random tensors shaped as the synthetic
input (a pool of at most SYNTHETIC_POOL images reused by index, labels of the training split's
size), in the spec's input kind, as the harness feeds it:

- synthetic: the pool in host memory; each step's batch gathered by index in a tf.data
  pipeline; on a GPU prefetched to it (prefetch_to_device: the copy runs while the step
  before does).
- device: the pool, the labels and the run's index order put on the device once, before the
  clock; each step gathers on the device: no host-to-device copy in a timed step.

A custom loop rather than model.fit: fit takes its batches from the host, so it cannot run the
device input. The step runs without XLA (jit_compile=False), as the harness's does. The run's
order (a permutation per epoch) is drawn before the first epoch, and one stream of batches
runs through every epoch. Each epoch's clock stops after the device is synchronised; one JSON
line per epoch.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order and synthetic values (numpy's and TF's RNG here), the tf.distribute strategy, data
parallelism, its calibrated units and evaluations, the loss read.

    python benchmarks/bare/chestxray_tensorflow.py SPEC_FILE EPOCHS
"""
import numpy as np

from dlbench import bare
from dlbench.workloads.chestxray.labels import PATHOLOGIES
from dlbench.workloads.chestxray.synthetic import synthetic_sizes


def main():
    import keras
    import tensorflow as tf

    from dlbench.workloads.chestxray.tensorflow import build_model

    spec, epochs, device = bare.start("tensorflow")
    gpu = device == "/gpu:0"

    n_train, pool = synthetic_sizes(spec)
    crop = spec.data.crop
    n_batches = n_train // spec.batch  # the last partial batch is dropped, as in the harness
    rng = np.random.default_rng(spec.seed)
    order = np.concatenate([rng.permutation(n_train)[:n_batches * spec.batch] for _ in range(epochs)])
    order = order.reshape(epochs * n_batches, spec.batch)
    with tf.device("/cpu:0"):
        images = tf.random.normal((pool, crop, crop, 3))
        labels = tf.cast(tf.random.uniform((n_train, len(PATHOLOGIES)), maxval=2, dtype=tf.int32), tf.float32)

    if spec.input == "resident":
        with tf.device(device):
            images, labels = tf.identity(images), tf.identity(labels)
            steps = tf.unstack(tf.identity(tf.constant(order)))

        @tf.function
        def gather(index):
            return tf.gather(images, index % pool), tf.gather(labels, index)

        batches = (gather(index) for index in steps)
        if gpu:
            tf.test.experimental.sync_devices()
    else:
        data = tf.data.Dataset.from_tensor_slices(order).map(lambda index: (tf.gather(images, index % pool),
                                                                            tf.gather(labels, index)))
        data = data.apply(tf.data.experimental.prefetch_to_device(device)) if gpu else data.prefetch(tf.data.AUTOTUNE)
        batches = iter(data)

    model = build_model(spec.model, crop, spec.weights)
    opt = spec.optimizer
    optimizer = keras.optimizers.Adam(opt.lr, beta_1=opt.beta1, beta_2=opt.beta2, epsilon=opt.eps)
    loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)

    @tf.function(jit_compile=False)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return loss

    clock = bare.EpochClock(n_batches * spec.batch, device_kind="gpu" if gpu else "cpu", input=spec.input)
    for epoch in range(1, epochs + 1):
        clock.start()
        for _ in range(n_batches):
            loss = train_step(*next(batches))
        if gpu:
            tf.test.experimental.sync_devices()
        else:
            loss.numpy()  # the step's ops have run
        clock.stop(epoch)


if __name__ == "__main__":
    main()
