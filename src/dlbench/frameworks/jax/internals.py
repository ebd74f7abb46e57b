"""Every use of JAX's and grain's private API (jax._src, grain._src), written for JAX 0.10.2
and grain 0.2.18, each checked at import (grain's where grain is imported: the Keras-on-JAX
environment has no grain).

What each works around:
- xla_started: `configure` must set the CPU device count and the threads before XLA
  starts (its platforms' clients), and say so when it is too late; JAX exports no way to ask
  (jax/_src/xla_bridge.py: backends_are_initialized).
- wait_for_released_batches: grain unlinks the shared memory of the batches it handed out on a
  thread of its own (SharedMemoryArray.enable_async_del, grain/_src/python/ipc/
  shared_memory_array.py); the last batches of a run, let go just before the protocol's
  os._exit, would be left to multiprocessing's resource tracker, which warns of them. Its one
  worker thread runs in order: a no-op queued on its pool returns once the earlier are done.
"""
from importlib.metadata import version

import jax

from dlbench.frameworks import check_written_for

WRITTEN_FOR = {"jax": "0.10.2", "grain": "0.2.18"}
check_written_for(__file__, "jax", jax.__version__, WRITTEN_FOR["jax"])


def xla_started():
    from jax._src import xla_bridge

    return xla_bridge.backends_are_initialized()


def wait_for_released_batches():
    """Return once grain's thread has unlinked the batches let go so far (no grain: at once)."""
    try:
        import grain  # noqa: F401
    except ImportError:
        return
    check_written_for(__file__, "grain", version("grain"), WRITTEN_FOR["grain"])
    from grain._src.python.ipc.shared_memory_array import SharedMemoryArray

    pool = SharedMemoryArray._del_thread_pool  # None until grain's first shared batch
    if pool is not None:
        pool.apply(int)
