"""Every use of PyTorch's private API (torch.utils._*), written for PyTorch 2.13.0 and checked at
import.

What each works around:
- TorchDispatchMode, tree_leaves: the precision record's list of the aten ops a forward pass
  dispatched, each with its inputs' dtype (dlbench.frameworks.pytorch.forward_ops). The dispatch
  mode is how torch.utils.flop_counter itself sees the ops (FlopCounterMode), and PyTorch exports
  it only from torch.utils._python_dispatch; its pytree from torch.utils._pytree.
"""
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from dlbench.frameworks import check_written_for

WRITTEN_FOR = {"torch": "2.13.0"}
check_written_for(__file__, "torch", torch.__version__.split("+")[0], WRITTEN_FOR["torch"])

__all__ = ["TorchDispatchMode", "tree_leaves"]
