"""TensorFlow's input: tf.data pipelines over the run's order, one per replica (`distribute`)."""
import numpy as np
import tensorflow as tf

from dlbench.contract import shard
from dlbench.frameworks.tensorflow import strategy


def host_tensor(array):
    """A numpy array as a tensor in host memory, for tf.data to gather from (no device copy)."""
    with tf.device("/cpu:0"):
        return tf.constant(array)


def loader_options(workers):
    """tf.data options of a loader with `workers` workers: each map call in one thread
    (max_intra_op_parallelism 1) and no parallelism or prefetch that tf.data would add itself
    (map_parallelization, inject_prefetch off), so that with 0 workers it loads in the
    consuming thread; with workers > 0, a private pool of `workers` threads runs the maps."""
    options = tf.data.Options()
    options.threading.max_intra_op_parallelism = 1
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    if workers:
        options.threading.private_threadpool_size = workers  # not the compute threads' pools
    return options


def distribute(placement, order, make_dataset, to_device=False):
    """The run's order as this process's input, made once and iterated across every block:
    replica r of the process takes shard r (dlbench.contract.shard) of each of the process's
    batches. to_device: on a GPU, each replica's batches prefetched to its device, one ahead
    (tf.data's idiom, so that the copy runs while the step before computes: one replica,
    tf.data.experimental.prefetch_to_device; several, the distributed dataset's
    experimental_fetch_to_device); without it (and on a CPU), strategy.run copies them in the step.

    order: this process's index batches (steps, process batch), every epoch back to back, as
    long as the run could take. make_dataset(shards): shards is an int array (steps,
    per-replica batch), the shards of one replica; it returns a tf.data.Dataset with one
    element (a per-replica batch) per row, read lazily (as far as the steps and the loader's
    prefetch go: the run stops before the end of its order).

    One replica per process (none, multiworker): the process's dataset itself, which
    strategy.run takes as the replica's input. Several (mirrored): a distributed dataset,
    strategy.distribute_datasets_from_function with one input pipeline per replica
    (InputReplicationMode.PER_REPLICA), its elements left in host memory for strategy.run to
    copy. Neither uses tf.distribute's multi-device iterator (on a CPU; to_device on a GPU
    does, and prefetch_to_device's copy_to_device too): it is built on tf.data's
    GeneratorDataset, whose construction in TF 2.21 sets glibc's M_TRIM_THRESHOLD to 128 KB
    for the whole process ("Memory patch applied"), after which every large allocation
    faults its pages in afresh: the steps that follow take twice the CPU time on a CPU
    (DenseNet-121, batch 2: 500,000 minor page faults per step instead of 42,000).
    """
    dist = strategy(placement)
    local = placement.local_devices
    to_device = to_device and placement.device_kind == "gpu"
    if local == 1:
        data = make_dataset(order)
        if to_device:  # the last transformation, as it must be
            data = data.apply(tf.data.experimental.prefetch_to_device(dist.extended.worker_devices[0], 1))
        return data

    def dataset_fn(context):
        return make_dataset(np.stack([shard(b, context.input_pipeline_id, local) for b in order]))

    options = tf.distribute.InputOptions(experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
                                         experimental_fetch_to_device=to_device)
    return dist.distribute_datasets_from_function(dataset_fn, options)
