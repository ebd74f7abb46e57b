"""MNIST in plain TensorFlow/Keras, as a tutorial writes the loop: model.compile and
model.fit on a tf.data pipeline of the training arrays in memory; the benchmark's model,
batch, threads and optimizer, EPOCHS epochs on one device.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order (tf.data's shuffle here), the tf.distribute strategy and its distributed dataset, data
parallelism, its calibrated units and evaluations, the loss read. fit runs without XLA
(jit_compile=False, which Keras would pick on a GPU), as the harness's step does.

    python benchmarks/bare/mnist_tensorflow.py SPEC_FILE EPOCHS
"""
import numpy as np

from dlbench import bare


def main():
    import keras
    import tensorflow as tf

    from dlbench.workloads.mnist.tensorflow import build_model

    spec, epochs, _ = bare.start("tensorflow")
    images, labels = bare.training_arrays(spec, "train_images", "train_labels")
    images, labels = images.transpose(0, 2, 3, 1).astype(np.float32), labels.astype(np.int32)
    n_batches = len(images) // spec.batch  # the last partial batch is dropped, as in the harness
    data = (tf.data.Dataset.from_tensor_slices((images, labels))
            .shuffle(len(images)).batch(spec.batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE))

    model = build_model(spec.model.name)
    opt = spec.optimizer
    model.compile(optimizer=keras.optimizers.Adam(opt.lr, beta_1=opt.beta1, beta_2=opt.beta2, epsilon=opt.eps),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    model.fit(data, epochs=epochs, verbose=0, shuffle=False,
              callbacks=[bare.keras_callback(bare.EpochClock(n_batches * spec.batch))])


if __name__ == "__main__":
    main()
