"""ChestX-ray DenseNet-121 in plain JAX (Flax NNX, optax), as a tutorial writes the loop: the
project's DenseNet (workloads/chestxray/jax.py), the benchmark's batch, threads, optimizer,
float32 policy and epochs on one device (JAX's default device, a GPU where there is one,
unless the spec's device is cpu), random arrays shaped as the synthetic input (a pool of at
most SYNTHETIC_POOL images reused by index, channels last; labels of the training split's
size), in the spec's input kind, as the harness feeds it:

- synthetic: the pool in host memory; each step's batch gathered by index on the host and put
  on the device one step ahead (jax.device_put is asynchronous: the copy runs while the step
  before does).
- device: the pool, the labels and the run's index order (one device array per step) put on
  the device once, before the clock; each step gathers on the device: no host-to-device copy
  in a timed step.

The step: jax.jit over the model's and optimizer's state (nnx.split once, nnx.merge inside),
the state donated, as Flax's performance guide writes it. The run's order (a permutation per
epoch) is drawn before the first epoch, and one stream of batches runs through every epoch,
as the harness's one iterable over the run's order. Each epoch's clock stops once the last
step's outputs are ready (block_until_ready); one JSON line per epoch.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order and synthetic values (numpy's RNG here), the mesh and data parallelism, validation
after every epoch and the final test evaluation, the loss read.

    python benchmarks/bare/chestxray_jax.py SPEC_FILE EPOCHS
"""
import functools

import numpy as np

from dlbench import bare
from dlbench.workloads.chestxray.labels import PATHOLOGIES
from dlbench.workloads.chestxray.synthetic import synthetic_sizes


def main():
    spec, epochs, device = bare.start("jax")  # before JAX's import, which reads the thread settings
    import jax
    import optax
    from flax import nnx

    from dlbench.workloads.chestxray.jax import build_model

    rng = np.random.default_rng(spec.seed)
    n_train, pool = synthetic_sizes(spec)
    crop = spec.data.crop
    images = rng.standard_normal((pool, crop, crop, 3), dtype=np.float32)
    labels = rng.integers(0, 2, (n_train, len(PATHOLOGIES))).astype(np.float32)
    n_batches = n_train // spec.batch  # the last partial batch is dropped, as in the harness
    order = np.concatenate([rng.permutation(n_train)[:n_batches * spec.batch] for _ in range(epochs)])
    order = order.reshape(epochs * n_batches, spec.batch)

    def host_batches():
        upcoming = jax.device_put((images[order[0] % pool], labels[order[0]]), device)
        for step in range(len(order)):
            batch = upcoming
            if step + 1 < len(order):
                upcoming = jax.device_put((images[order[step + 1] % pool], labels[order[step + 1]]), device)
            yield batch

    @jax.jit
    def gather(images, labels, index):
        return images[index % images.shape[0]], labels[index]

    def device_batches(on_device):
        for index in on_device[2]:
            yield gather(on_device[0], on_device[1], index)

    if spec.input == "resident":
        on_device = jax.block_until_ready(jax.device_put((images, labels, list(order)), device))
        batches = device_batches(on_device)
    else:
        batches = host_batches()

    model = build_model(spec.model, nnx.Rngs(spec.seed))
    opt = spec.optimizer
    optimizer = nnx.Optimizer(model, optax.adam(opt.lr, b1=opt.beta1, b2=opt.beta2, eps=opt.eps), wrt=nnx.Param)
    graphdef, state = nnx.split((model, optimizer))
    state = jax.device_put(state, device)

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(state, x, y):
        model, optimizer = nnx.merge(graphdef, state)

        def loss_fn(model):
            return optax.sigmoid_binary_cross_entropy(model(x), y).mean()

        loss, grads = nnx.value_and_grad(loss_fn)(model)
        optimizer.update(model, grads)
        return nnx.state((model, optimizer)), loss

    clock = bare.EpochClock(n_batches * spec.batch, device_kind="cpu" if device.platform == "cpu" else "gpu",
                            input=spec.input)
    for epoch in range(1, epochs + 1):
        clock.start()
        for _ in range(n_batches):
            state, loss = train_step(state, *next(batches))
        jax.block_until_ready((state, loss))
        clock.stop(epoch)


if __name__ == "__main__":
    main()
