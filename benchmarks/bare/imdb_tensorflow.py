"""IMDB in plain TensorFlow/Keras, as a tutorial writes the loop: model.compile and model.fit
on a tf.data pipeline of the training sequences in memory, the learning-rate schedule as a
LearningRateScheduler callback; the benchmark's LSTM, batch, threads and optimizer, EPOCHS
epochs on one device.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order (tf.data's shuffle here), the loader's workers setting (a prefetching tf.data pipeline
here), the tf.distribute strategy, its calibrated units and evaluations, the loss read. fit
runs without XLA (jit_compile=False, which Keras would pick on a GPU), as the harness's step
does.

    python benchmarks/bare/imdb_tensorflow.py SPEC_FILE EPOCHS
"""
import numpy as np

from dlbench import bare


def main():
    import keras
    import tensorflow as tf

    from dlbench.workloads.imdb.tensorflow import build_model

    spec, epochs, _ = bare.start("tensorflow")
    sequences, labels = bare.training_arrays(spec, "train_sequences", "train_labels")
    sequences, labels = sequences.astype(np.int32), labels.astype(np.int32)
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
              callbacks=[step_decay, bare.keras_callback(bare.EpochClock(n_batches * spec.batch))])


if __name__ == "__main__":
    main()
