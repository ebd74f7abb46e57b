"""What every PyTorch workload module shares for its step: the precision policy (`autocast`, the
forward pass and the loss under torch.autocast; `grad_scaler`, float16's dynamic loss scaling) and
`WorkloadMethods`: predictions, the parameter count, loading the shared weights, the backward pass
and the optimizers' steps under the policy (`WorkloadMethods.backward_step`), and the proof of it
(the adapter's forward_ops)."""
import functools
from contextlib import nullcontext

import torch

from dlbench import precision
from dlbench.frameworks.pytorch import device, forward_ops

AUTOCAST_DTYPE = {"mixed-bfloat16": torch.bfloat16, "mixed-float16": torch.float16}


def autocast(policy, placement):
    """The context of a policy's forward pass and loss: torch.autocast to its 16-bit type on the
    run's device type (cpu, cuda); float32 enters none (its numerics as before this dimension)."""
    if policy not in AUTOCAST_DTYPE:
        return nullcontext()
    return torch.autocast(device_type=device(placement).type, dtype=AUTOCAST_DTYPE[policy])


def grad_scaler(policy, placement):
    """torch.amp's dynamic loss scaling where the policy scales (float16), else None."""
    return torch.amp.GradScaler(device(placement).type) if precision.LOSS_SCALING[policy] else None



class WorkloadMethods:
    """What every PyTorch workload module does the same way with its self.model and
    self.device: predictions in eval mode without gradients, the parameter count, loading a
    state dict of numpy arrays (PyTorch's layout is the reference: nothing to convert), and the
    precision policy: the forward pass and loss under `self.autocast()`, the backward pass and
    the optimizers' steps through `self.backward_step` (loss scaling where the policy scales), the proof."""

    input_dtype = "float32"  # of the numpy inputs predict() receives

    def autocast(self):
        return autocast(self.applied_precision, self.placement)

    @functools.cached_property
    def scaler(self):
        """The GradScaler of the mixed-float16 policy (None under the others)."""
        return grad_scaler(self.applied_precision, self.placement)

    def backward_step(self, loss, *optimizers):
        """The backward pass and each optimizer's step; under a GradScaler the loss scaled, each
        step skipped where its gradients overflowed, then the scale updated (once per step)."""
        if self.scaler is None:
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
            return
        self.scaler.scale(loss).backward()
        for optimizer in optimizers:
            self.scaler.step(optimizer)
        self.scaler.update()

    @torch.no_grad()
    def predict(self, inputs):
        self.model.eval()
        with self.autocast():
            outputs = self.model(torch.from_numpy(inputs.astype(self.input_dtype, copy=False)).to(self.device))
        self.model.train()
        return outputs.float().cpu().numpy()  # float(): numpy has no bfloat16 (float32 as is)

    def precision_ops(self, inputs):
        """The compute ops of predict's forward pass (under the policy), and whether the loss is scaled."""
        return forward_ops(self.predict, inputs), self.scaler is not None

    def parameter_count(self):
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    def load_weights(self, weights):
        self.model.load_state_dict({name: torch.from_numpy(value) for name, value in weights.items()})
