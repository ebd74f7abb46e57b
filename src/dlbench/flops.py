"""The floating-point operations of one training step, counted once for every framework (pure).

The convention, the one torch.utils.flop_counter follows: the convolutions and matrix products
only (a multiply-add is 2 FLOPs; activations, pooling, normalisation, the loss and the optimizer
are left out: a few percent of a step); forward, then backward: each layer's weight gradient
(as many FLOPs as its forward) and its input gradient (as many again), except where the input
needs none (the first layer's images). tests/test_flops.py checks each model against PyTorch's
counter and MNIST small against a count by hand.

A workload's definition counts its model from its spec (RunSet.flops: FLOPs per training
sample); the runs tables give FLOP/s, and the peak workload the machine's attainable FLOP/s.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    forward: int               # FLOPs of the forward pass, per sample
    input_gradient: bool = True  # whether backward computes the gradient of its input


def conv2d(c_in, c_out, kernel, height_out, width_out, input_gradient=True):
    return Layer(2 * c_in * kernel * kernel * c_out * height_out * width_out, input_gradient)


def linear(n_in, n_out, input_gradient=True):
    return Layer(2 * n_in * n_out, input_gradient)


def training(layers):
    """FLOPs of one training sample through `layers`: forward, weight gradients, input gradients."""
    return sum(2 * layer.forward + (layer.forward if layer.input_gradient else 0) for layer in layers)
