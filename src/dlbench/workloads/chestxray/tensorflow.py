"""ChestX-ray14 DenseNet (config chestxray.blocks; DenseNet-121's architecture) in TensorFlow/Keras 3:
one device (OneDeviceStrategy),
MirroredStrategy, MultiWorkerMirroredStrategy.

The model: keras.applications' DenseNet builder (no top, global average pool) and a Dense head of 14
logits, binary cross-entropy on the logits, Adam at the base learning rate times the device
count. Input "real": the preprocessed grey images through tf.data (`TrainLoader`: read_file,
decode_jpeg or decode_png, the crop at (top, left) and the flip that the shared seed draws
(self.augmentation, drawn in NumPy batch by batch as tf.data reaches each batch), the grey
value replicated to 3 channels and ImageNet-normalised), `workers` parallel map calls;
"synthetic": the task's random images as host tensors (NHWC), gathered by index % pool in
tf.data, nothing decoded. Either way one dataset over the run's order, each replica taking its
shard of the process's batches (dlbench.frameworks.tensorflow.distribute), on a GPU prefetched
to each replica's device one batch ahead (tf.data's prefetch_to_device), and one
tf.function step per batch (strategy.run) is called from the protocol's loop, as Keras' fit
with steps_per_execution=1 (the old script traced a whole epoch into one graph; the shared
protocol owns the loop). Input "resident": the same images and labels and each replica's shards of
the run's order copied to each replica's device once, outside the clock (tf.identity under
tf.device), each step's batch gathered there by eager tf.gather (no tf.data: its datasets live in
host memory). Evaluation makes a tf.data pipeline of its own each time: it runs
between convergence segments, while the training dataset's iterator is open.
"""
import contextlib
import functools
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from dlbench.workloads.chestxray.images import FORMAT_SUFFIXES, IMAGENET_MEAN, IMAGENET_STD
from dlbench.contract import Steps, shard
from dlbench.errors import DataError
from dlbench.frameworks import tensorflow as adapter
from dlbench.frameworks.tensorflow.loaders import distribute, host_tensor, loader_options
from dlbench.frameworks.tensorflow.step import dtype_policy, make_adam, WorkloadMethods
from dlbench.workloads.chestxray.task import ChestXray
from dlbench.workloads.chestxray.keras import build_model, load_weights  # the Keras model, shared

# --- data ------------------------------------------------------------------------------------------

def decoder(paths):
    """tf.io.decode_jpeg for JPEG files (what preprocessing writes for training), decode_png for PNGs.

    JPEGs with libjpeg's accurate integer DCT, as Pillow and OpenCV decode them: the same pixels
    as the other frameworks (TF's default, the fast DCT, is up to 2 grey levels off on about
    half of the pixels)."""
    suffixes = {Path(p).suffix.lower() for p in paths}
    if suffixes <= set(FORMAT_SUFFIXES["jpeg"]):
        return functools.partial(tf.io.decode_jpeg, dct_method="INTEGER_ACCURATE")
    if suffixes <= set(FORMAT_SUFFIXES["png"]):
        return tf.io.decode_png
    raise DataError(f"the images must be all JPEG or all PNG, found {sorted(suffixes)}")


def normalise(patch):
    """uint8 [H, W, 1] grey -> float32 [H, W, 3]: grey replicated, ImageNet mean and std."""
    return (tf.cast(patch, tf.float32) * (1 / 255) - IMAGENET_MEAN) / IMAGENET_STD


def mapped(data, sample, workers):
    """data.map(sample): `workers` calls at a time, in order; with 0 workers in the consuming thread."""
    if workers:
        return data.map(sample, num_parallel_calls=workers, deterministic=True)
    return data.map(sample)


class TrainLoader:
    """The real-input training loader, made once (build_training), its dataset once over the
    run's order: tf.data over the samples' indices and augmentation values, `sample` mapped by
    `workers` parallel calls (none: in the consuming thread), batched per replica, prefetched
    when workers > 0."""

    def __init__(self, workload):
        self.workload, spec = workload, workload.spec
        self.crop, self.workers = spec.data.crop, spec.workers
        self.decode = decoder(workload.train_paths)
        self.paths = host_tensor(np.array(workload.train_paths))
        self.labels = host_tensor(workload.train_labels)

    def sample(self, index, top, left, flip):
        """decode, crop at (top, left), flip when told, normalise."""
        image = self.decode(tf.io.read_file(tf.gather(self.paths, index)), channels=1)
        patch = tf.image.crop_to_bounding_box(image, top, left, self.crop, self.crop)
        patch = tf.cond(flip > 0, lambda: tf.image.flip_left_right(patch), lambda: patch)
        return normalise(patch), tf.gather(self.labels, index)

    def draws(self, indices, epoch):
        """A batch's indices and their (top, left, flip): the shared seed's values, drawn in
        NumPy when tf.data reaches the batch (drawn up front, a long run's order would take
        minutes), as the other frameworks' loaders draw them."""
        values = tf.numpy_function(lambda e, i: self.workload.augmentation(int(e), i), [epoch, indices],
                                   [tf.int32] * 3, stateful=False)
        return (indices, *(tf.ensure_shape(v, indices.shape) for v in values))

    def dataset(self, shards, epochs):
        """shards: one replica's index batches (steps, batch); epochs: each step's epoch."""
        data = tf.data.Dataset.from_tensor_slices((shards, epochs)).map(self.draws).unbatch()
        data = mapped(data, self.sample, self.workers)
        data = data.batch(shards.shape[1], drop_remainder=True)
        if self.workers:
            data = data.prefetch(tf.data.AUTOTUNE)
        return data.with_options(loader_options(self.workers))

    def batches(self, order, epochs):
        return distribute(self.workload.placement, order, lambda shards: self.dataset(shards, epochs), to_device=True)


# --- training --------------------------------------------------------------------------------------

class RecomputingDenseNet:
    """Mode recompute: the Keras DenseNet's training forward pass, layer by layer in the order
    keras.applications built them, with each dense layer's bottleneck (conv{b}_block{l}_0_bn,
    _0_relu, _1_conv: the concatenated features' normalisation, ReLU and 1x1 convolution) under
    tf.recompute_grad, as PyTorch's mode checkpoint: their outputs are not kept for the backward
    pass but recomputed from the block's features, which the concatenations keep anyway. The
    layers are the model's, built: tf.recompute_grad watches the variables they read (it cannot
    see variables created inside it)."""

    def __init__(self, model):
        self.steps, remaining = [], iter(model.layers[1:])  # after the InputLayer
        self.norms = []  # the bottlenecks' BatchNormalization layers
        for layer in remaining:
            if layer.name.startswith("conv") and layer.name.endswith("_0_bn"):
                relu, conv = next(remaining), next(remaining)
                assert relu.name.endswith("_0_relu") and conv.name.endswith("_1_conv"), (relu.name, conv.name)
                self.norms.append(layer)
                self.steps.append(("bottleneck", tf.recompute_grad(
                    lambda x, norm=layer, relu=relu, conv=conv: conv(relu(norm(x, training=True))))))
            elif isinstance(layer, keras.layers.Concatenate):
                self.steps.append(("concat", layer))
            else:
                self.steps.append(("layer", layer))

    def __call__(self, images):
        x = features = images
        for kind, step in self.steps:
            if kind == "bottleneck":
                features, x = x, step(x)  # the dense layer's input, concatenated with its output
            elif kind == "concat":
                x = step([features, x])
            else:
                x = step(x, training=True)
        return x

    @contextlib.contextmanager
    def recomputing(self):
        """Around the backward pass, where the bottlenecks run again: their normalisation uses the
        batch's statistics as in the forward pass, but momentum 1 keeps the moving statistics as
        the forward pass left them (Keras' layer would update them a second time). Keras reads
        the momentum when the step is traced."""
        momenta = [norm.momentum for norm in self.norms]
        for norm in self.norms:
            norm.momentum = 1.0
        try:
            yield
        finally:
            for norm, momentum in zip(self.norms, momenta):
                norm.momentum = momentum


class TensorFlowChestXray(WorkloadMethods, ChestXray, Steps):
    def build_model(self):
        keras.utils.set_random_seed(self.spec.seed)  # the same initial weights in every worker
        self.strategy = adapter.strategy(self.placement)
        crop = self.spec.data.crop
        with self.strategy.scope(), dtype_policy(self.applied_precision):
            self.model = build_model(self.spec.model, crop, self.spec.weights)

        @tf.function(input_signature=[tf.TensorSpec((None, crop, crop, 3), tf.float32)])
        def infer(images):
            return tf.cast(self.model(images, training=False), tf.float32)  # a mixed policy's logits are 16-bit

        self.infer = infer

    def build_training(self):
        with self.strategy.scope():
            self.optimizer = make_adam(self.spec, self.learning_rate, self.applied_precision)
            self.optimizer.build(self.model.trainable_variables)  # its slots mirrored too, made here
            self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)  # the mean over samples and pathologies
        if self.spec.mode == "recompute":
            self.recomputing_model = RecomputingDenseNet(self.model)
        if self.spec.input == "real":
            self.loader = TrainLoader(self)
        else:  # the input pipeline's copy in host memory, as MNIST keeps its data (resident: the source of its copies)
            self.images = host_tensor(np.ascontiguousarray(self.synthetic_images.transpose(0, 2, 3, 1)))
            self.labels = host_tensor(self.synthetic_labels)
            del self.synthetic_images, self.synthetic_labels
        self.step = self.make_step()

    def gradients(self, inputs, labels):
        if self.spec.mode != "recompute":
            return super().gradients(inputs, labels)
        model = self.recomputing_model
        with tf.GradientTape() as tape:
            loss = self.loss_fn(labels, tf.cast(model(inputs), tf.float32))
            scaled = self.optimizer.scale_loss(loss)
        with model.recomputing():
            return loss, tape.gradient(scaled, self.model.trainable_variables)

    def batches(self, order, epochs):
        if self.spec.input == "real":
            return self.loader.batches(order, epochs)
        if self.spec.input == "resident":
            return self.resident_batches(order)
        pool = self.images.shape[0]

        def make_dataset(shards):
            # One vectorised gather per batch, in the consuming thread (no loader, no prefetch).
            return (tf.data.Dataset.from_tensor_slices(shards)
                    .map(lambda i: (tf.gather(self.images, i % pool), tf.gather(self.labels, i)))
                    .with_options(loader_options(0)))

        return distribute(self.placement, order, make_dataset, to_device=True)

    def resident_batches(self, order):
        """Input "resident": on each of this process's replica devices, the images, the labels and
        its shard of every step's indices (by index % pool, by index), put there now; step i
        gathers replica r's batch on replica r's device. One replica: the tensors themselves, as
        `distribute` gives its dataset's; several: per-replica values for strategy.run."""
        dist, local = self.strategy, self.placement.local_devices
        pool, replicas = self.images.shape[0], []
        for r, device in enumerate(dist.extended.worker_devices):
            shards = np.stack([shard(b, r, local) for b in order])
            with tf.device(device):
                replicas.append((device, tf.identity(self.images), tf.identity(self.labels),
                                 tf.unstack(tf.identity(shards % pool)), tf.unstack(tf.identity(shards))))

        def gathered(r, step):
            device, images, labels, pooled, indices = replicas[r]
            with tf.device(device):
                return tf.gather(images, pooled[step]), tf.gather(labels, indices[step])

        if local == 1:
            return (gathered(0, step) for step in range(len(order)))
        return (dist.experimental_distribute_values_from_function(
            lambda context, step=step: gathered(context.replica_id_in_sync_group, step)) for step in range(len(order)))

    def eval_inputs(self, paths):
        """The images of `paths` decoded and centre-cropped by tf.data, as NCHW float32 batches."""
        decode, crop, workers = decoder(paths), self.spec.data.crop, self.spec.workers

        def sample(path):
            image = decode(tf.io.read_file(path), channels=1)
            shape = tf.shape(image)
            return normalise(tf.image.crop_to_bounding_box(image, (shape[0] - crop) // 2, (shape[1] - crop) // 2,
                                                           crop, crop))

        data = mapped(tf.data.Dataset.from_tensor_slices(list(paths)), sample, workers).batch(self.spec.batch)
        if workers:
            data = data.prefetch(tf.data.AUTOTUNE)
        for images in data.with_options(loader_options(workers)):
            yield images.numpy().transpose(0, 3, 1, 2)

    def model_inputs(self, inputs):
        return np.ascontiguousarray(inputs.transpose(0, 2, 3, 1))

    def predict(self, inputs):
        return self.infer(self.model_inputs(inputs)).numpy()

    def load_weights(self, weights):
        load_weights(self.model, weights)


WORKLOAD = TensorFlowChestXray
