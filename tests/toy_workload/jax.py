"""Logistic regression in JAX (Flax NNX, optax)."""
import numpy as np
import optax
from flax import nnx

from dlbench.contract import Steps
from dlbench.frameworks.jax.step import make_adam, WorkloadMethods, place_batch, Training
from dlbench.workloads.toy.task import Toy


class Linear(nnx.Module):
    def __init__(self, features, classes, rngs):
        self.linear = nnx.Linear(features, classes, rngs=rngs)

    def __call__(self, x):
        return self.linear(x)


def cross_entropy(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


class JaxToy(WorkloadMethods, Toy, Steps):
    def build_model(self):
        self.model = Linear(self.spec.model.features, self.spec.model.classes, nnx.Rngs(self.spec.seed))

    def build_training(self):
        self.training = Training(self.placement, self.model, make_adam(self.spec, self.spec.optimizer.lr), cross_entropy)
        self.labels = self.train_y.astype(np.int32)

    def batches(self, order, epochs):
        return (place_batch(self.placement, (self.train_x[indices], self.labels[indices])) for indices in order)

    def train_step(self, batch):
        return self.training(*batch)


WORKLOAD = JaxToy
