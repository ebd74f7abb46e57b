"""Every use of TensorFlow's private API (tensorflow.python), written for TensorFlow 2.21.0 and
checked at import.

What each works around:
- onednn_enabled: whether this TensorFlow runs its CPU kernels through oneDNN (on by default on
  x86 Linux, off with TF_ENABLE_ONEDNN_OPTS=0), for the record; TensorFlow exports no way to
  ask, and its own tests ask tensorflow/python/util/_pywrap_util_port.IsMklEnabled.
"""
import tensorflow as tf

from dlbench.frameworks import check_written_for

WRITTEN_FOR = "2.21.0"
check_written_for(__file__, "tensorflow", tf.__version__, WRITTEN_FOR)


def onednn_enabled():
    from tensorflow.python.util import _pywrap_util_port

    return bool(_pywrap_util_port.IsMklEnabled())
