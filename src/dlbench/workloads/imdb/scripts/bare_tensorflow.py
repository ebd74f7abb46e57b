"""IMDB in plain TensorFlow/Keras, as a tutorial writes the loop: model.compile and model.fit
on a tf.data pipeline of the training sequences in memory, the learning-rate schedule as a
LearningRateScheduler callback; the benchmark's LSTM, batch, threads and optimizer, EPOCHS
epochs on one device.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order (tf.data's shuffle here), the loader's workers setting (a prefetching tf.data pipeline
here), the tf.distribute strategy, its calibrated units and evaluations, the loss read. fit
runs without XLA (jit_compile=False, which Keras would pick on a GPU), as the harness's step
does.

    python src/dlbench/workloads/imdb/scripts/bare_tensorflow.py SPEC_FILE EPOCHS
"""
import json
import sys
import time

import numpy as np

from dlbench.specs import spec_from_dict


def main():
    import keras
    import tensorflow as tf

    from dlbench.frameworks.tensorflow import gpu_float32

    from dlbench.workloads.imdb.tensorflow import build_model

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
    gpu_float32(spec.gpu_float32)  # the run's float32 policy on GPUs, set as the harness's backend sets it
    keras.utils.set_random_seed(spec.seed)

    limit = spec.data.train_limit
    sequences = np.load(spec.data.train_sequences, mmap_mode="r")[:limit].astype(np.int32)
    labels = np.load(spec.data.train_labels, mmap_mode="r")[:limit].astype(np.int32)
    n_batches = len(sequences) // spec.batch  # the last partial batch is dropped, as in the harness
    data = (tf.data.Dataset.from_tensor_slices((sequences, labels))
            .shuffle(len(sequences)).batch(spec.batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))

    m, opt, schedule = spec.model, spec.optimizer, spec.schedule
    model = build_model(m.vocabulary, m.embedding, m.hidden, m.maxlen, m.classes)
    model.compile(optimizer=keras.optimizers.Adam(opt.lr, beta_1=opt.beta1, beta_2=opt.beta2, epsilon=opt.eps),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    # The study's schedule: the base rate times `factor` every `every_epochs` epochs (epoch counts from 0).
    step_decay = keras.callbacks.LearningRateScheduler(
        lambda epoch: opt.lr * schedule.factor ** (epoch // schedule.every_epochs))
    model.fit(data, epochs=epochs, verbose=0, shuffle=False,
              callbacks=[step_decay, EpochTimer(n_batches * spec.batch)])


if __name__ == "__main__":
    main()
