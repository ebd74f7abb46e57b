"""The product in JAX: jnp.dot, dispatched on its own (not jitted with the sum, which XLA could
rewrite into a cheaper computation)."""
import jax
import jax.numpy as jnp

from dlbench.contract import Steps
from dlbench.studies.matmul.task import Matmul


class JaxMatmul(Matmul, Steps):
    def on_device(self, *arrays):
        return tuple(jax.device_put(a, self.placement.handles["devices"][0]) for a in arrays)

    def product_sum(self, left, right):
        return jnp.dot(left, right).sum()


WORKLOAD = JaxMatmul
