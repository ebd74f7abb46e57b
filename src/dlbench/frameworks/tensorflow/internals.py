"""Every use of TensorFlow's private API (tensorflow.python), written for TensorFlow 2.21.0 and
checked at import.

What each works around:
- onednn_enabled: whether this TensorFlow runs its CPU kernels through oneDNN (on by default on
  x86 Linux, off with TF_ENABLE_ONEDNN_OPTS=0), for the record; TensorFlow exports no way to
  ask, and its own tests ask tensorflow/python/util/_pywrap_util_port.IsMklEnabled.
- function_graph: the graph of a function that a traced graph's op calls (the precision record's
  walk into a while loop's body), by FuncGraph._get_function: TensorFlow exports the called
  functions only as FunctionDefs, without their tensors' static shapes.
"""
import tensorflow as tf

from dlbench.frameworks import check_written_for

WRITTEN_FOR = "2.21.0"
check_written_for(__file__, "tensorflow", tf.__version__, WRITTEN_FOR)


def onednn_enabled():
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())


def function_graph(graph, name):
    """The FuncGraph of the function `name` that an op of `graph` calls (a while loop's body, a
    PartitionedCall's f), with its tensors' static shapes."""
    return graph._get_function(name).graph
