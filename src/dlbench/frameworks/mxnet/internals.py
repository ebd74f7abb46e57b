"""Every use of MXNet's private API (underscored attributes of Gluon's objects), written for
MXNet 1.9.1 and checked at import.

What each works around:
- stop_workers: a Gluon DataLoader's worker pool (DataLoader._worker_pool) is terminated only
  when the loader is garbage collected; the protocol ends with os._exit, which would leave the
  workers behind, so teardown terminates and joins the pool.
- batch_norm_settings, children: the model zoo's DenseNet-121 is checked to use PyTorch's batch
  normalisation (momentum and epsilon); a Block keeps its children and a BatchNorm its
  arguments only in Block._children and BatchNorm._kwargs.
- parameters_by_structure: an ImageNet parameter file saved with save_parameters names arrays
  by the model's structure (features.0.weight); Block._collect_params_with_prefix, which
  save_parameters and load_parameters use, gives the model's parameters under those names.
- barrier: a dist kvstore's barrier of every worker is KVStore._barrier only.
- leave_kvstore: a worker leaves a dist kvstore (waits for the others, stops the servers,
  finalizes, after which the scheduler and servers exit) only when the KVStore is freed, in
  its __del__; the Trainer that holds it lives until the protocol's os._exit, which frees
  nothing, so teardown frees its handle (MXKVStoreFree) and leaves __del__ a NULL one.
"""
import mxnet as mx
from mxnet.base import _LIB, check_call

from dlbench.frameworks import check_written_for

WRITTEN_FOR = "1.9.1"
check_written_for(__file__, "mxnet", mx.__version__, WRITTEN_FOR)


def stop_workers(loader):
    pool = getattr(loader, "_worker_pool", None)
    if pool is not None:
        pool.terminate()
        pool.join()
        loader._worker_pool = None


def children(block):
    return list(block._children.values())


def batch_norm_settings(block):
    """(momentum, epsilon) of a gluon.nn.BatchNorm."""
    return block._kwargs["momentum"], block._kwargs["eps"]


def parameters_by_structure(net):
    """{structural name (features.0.weight): Parameter} of a Block."""
    return net._collect_params_with_prefix()


def barrier(kvstore):
    kvstore._barrier()


def leave_kvstore(kvstore):
    check_call(_LIB.MXKVStoreFree(kvstore.handle))
    kvstore.handle = None  # MXKVStoreFree(NULL), in __del__, deletes nothing
