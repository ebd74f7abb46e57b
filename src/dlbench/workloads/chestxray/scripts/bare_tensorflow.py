"""ChestX-ray DenseNet-121 in plain TensorFlow/Keras, as a tutorial writes the loop:
model.compile and model.fit on a tf.data pipeline over random tensors in memory shaped as the
synthetic input (a pool of at most SYNTHETIC_POOL images reused by index, labels of the
training split's size); the benchmark's model, batch, threads and optimizer, EPOCHS epochs
on one device.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order and synthetic values (TF's RNG here), the tf.distribute strategy, data parallelism,
its calibrated units and evaluations, the loss read. fit runs without XLA
(jit_compile=False, which Keras would pick on a GPU), as the harness's step does.

    python src/dlbench/workloads/chestxray/scripts/bare_tensorflow.py SPEC_FILE EPOCHS
"""
import json
import sys
import time

from dlbench.workloads.chestxray.labels import FINDINGS, read_labels_csv
from dlbench.workloads.chestxray.synthetic import SYNTHETIC_POOL
from dlbench.specs import spec_from_dict


def main():
    import keras
    import tensorflow as tf

    from dlbench.workloads.chestxray.tensorflow import build_model

    class EpochTimer(keras.callbacks.Callback):
        """One JSON line per epoch: wall time around the epoch, the device synced before the clock stops."""

        def __init__(self, samples):
            super().__init__()
            self.samples = samples

        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            if tf.config.list_logical_devices("GPU"):
                tf.test.experimental.sync_devices()
            wall_s = time.perf_counter() - self.start
            print(json.dumps({"epoch": epoch + 1, "wall_s": wall_s, "samples": self.samples}), flush=True)

    with open(sys.argv[1]) as f:
        spec = spec_from_dict(json.load(f))
    epochs = int(sys.argv[2])
    tf.config.threading.set_intra_op_parallelism_threads(spec.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    gpus = tf.config.list_physical_devices("GPU")
    tf.config.set_visible_devices([] if spec.device == "cpu" else gpus[:1], "GPU")
    keras.utils.set_random_seed(spec.seed)

    n_train = len(read_labels_csv(spec.data.labels)["train"][0])
    crop = spec.data.crop
    with tf.device("/cpu:0"):
        images = tf.random.normal((min(n_train, SYNTHETIC_POOL), crop, crop, 3))
        labels = tf.cast(tf.random.uniform((n_train, len(FINDINGS)), maxval=2, dtype=tf.int32), tf.float32)
    pool = images.shape[0]
    n_batches = n_train // spec.batch  # the last partial batch is dropped, as in the harness
    data = (tf.data.Dataset.range(n_train).shuffle(n_train).batch(spec.batch, drop_remainder=True)
            .map(lambda index: (tf.gather(images, index % pool), tf.gather(labels, index)))
            .prefetch(tf.data.AUTOTUNE))

    model = build_model(spec.model, crop, spec.weights)
    opt = spec.optimizer
    model.compile(optimizer=keras.optimizers.Adam(opt.lr, beta_1=opt.beta1, beta_2=opt.beta2, epsilon=opt.eps),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True), jit_compile=False)
    model.fit(data, epochs=epochs, verbose=0, shuffle=False, callbacks=[EpochTimer(n_batches * spec.batch)])


if __name__ == "__main__":
    main()
