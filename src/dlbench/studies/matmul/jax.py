"""The product in JAX: jnp.dot, dispatched on its own (not jitted with the sum, which XLA could
rewrite into a cheaper computation), its operands in the run's precision. The proof: the product
as XLA compiles it (dlbench.frameworks.jax.hlo: its CPU backend may compute a bfloat16 dot in
float32, and then the run counts for float32's peak, not bfloat16's)."""
import jax
import jax.numpy as jnp

from dlbench.contract import Steps
from dlbench.frameworks.jax import hlo
from dlbench.studies.matmul.task import Matmul


class JaxMatmul(Matmul, Steps):
    def on_device(self, *arrays):
        return tuple(jax.device_put(a, self.placement.handles["devices"][0]).astype(self.compute_dtype)
                     for a in arrays)

    def product_sum(self, left, right):
        return jnp.dot(left, right).sum()

    def product_ops(self, left, right):
        return hlo.forward_ops(jnp.dot, left, right)


WORKLOAD = JaxMatmul
