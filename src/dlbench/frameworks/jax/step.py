"""What the JAX workload modules share for training: the compiled step over the pure state of
the model and its optax optimizer (`Training`: see the adapter's docstring for why jax.jit
over nnx.split state), batches on the mesh, Adam, predictions and the parameter count
(`WorkloadMethods`), the precision policy (`compute_dtype`, float16's dynamic loss scaling) and its
proof (`WorkloadMethods.precision_ops`)."""
import jax
import jax.numpy as jnp
import numpy as np

from dlbench import precision
from dlbench.frameworks.jax import forward_ops, hold, local_replica
from dlbench.frameworks.jax.torch_weights import torch_to_flax

# float16's dynamic loss scaling (as PyTorch's GradScaler and Keras' LossScaleOptimizer do it; JAX has
# none of its own): the loss times the scale, the gradients divided by it; a step whose gradients are
# not finite is skipped and halves the scale, GROWTH_INTERVAL finite steps in a row double it.
INITIAL_SCALE = 2.0 ** 15
GROWTH_INTERVAL = 2000


def place_batch(placement, arrays):
    """A host batch (a tuple of numpy arrays) on the devices: split along the batch axis over the
    mesh (device i takes the i-th contiguous slice), or on the one device. Across nodes `arrays`
    is this process's slice of the global batch (Placement.local), and the global batch is made
    of every process's (in one process, the function is device_put)."""
    return jax.make_array_from_process_local_data(placement.handles["batch"], arrays)


def make_adam(spec, learning_rate):
    """optax.adam with the spec's fields; the learning rate a hyperparameter in the optimizer
    state (optax.inject_hyperparams), so that a schedule sets it at any step without a new trace."""
    import optax

    opt = spec.optimizer
    return optax.inject_hyperparams(optax.adam)(learning_rate=learning_rate, b1=opt.beta1, b2=opt.beta2,
                                                eps=opt.eps)


def compute_dtype(policy):
    """The `dtype` of the model's Conv, Linear, Embed and LSTM-cell modules under a precision policy
    (Flax's idiom: no automatic mixed precision; a module computes in its dtype, its parameters
    keep param_dtype, float32 as Flax's default, so optax's state is float32 too; each module casts
    its inputs to its dtype, so the first one casts the model's inputs). BatchNorm keeps dtype None:
    its float32 parameters promote it to float32, as Keras' policies and autocast keep it.
    float32: None, Flax's inference from the float32 inputs and parameters (the model as before)."""
    return None if policy == "float32" else jnp.dtype(precision.COMPUTE_DTYPE[policy])


def loss_scale_update(scaler, finite):
    """The scale after a step (`finite`: whether its gradients were)."""
    good = jnp.where(finite, scaler["good"] + 1, 0)
    grow = good >= GROWTH_INTERVAL
    scale = jnp.where(finite, jnp.where(grow, scaler["scale"] * 2, scaler["scale"]), scaler["scale"] / 2)
    return {"scale": scale, "good": jnp.where(grow, 0, good)}


def abstract(build):
    """The model build() makes, its variables shapes and dtypes only (nnx.eval_shape), for a model
    whose every variable the shared initial weights then set: one of the layers torch_to_flax loads
    (which refuses a weight left out), none with state of another kind (IMDB's LSTM keeps RNG
    state: built concretely). Built concretely, each initializer's eager ops compile an XLA program
    of their own (MNIST's small CNN: 28, 2.6 of its 3.3 s build) for values that are overwritten."""
    from flax import nnx

    return nnx.eval_shape(build)


def parameters(model):
    """Trainable parameters (nnx.Param) of a Flax NNX model."""
    from flax import nnx

    return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))


class Training:
    """The model and its optimizer as one pure state (nnx.split), replicated over the mesh, and
    the jit-compiled step that updates it: loss_fn(model outputs, labels) -> the batch's mean loss,
    of the outputs cast to float32 (a no-op under float32). loss_scaling: float16's dynamic loss
    scaling (`self.scaler`, the scale and the finite steps in a row, beside the state)."""

    def __init__(self, placement, model, tx, loss_fn, loss_scaling=False):
        from flax import nnx

        self.placement = placement
        optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
        self.graphdef, state = nnx.split((model, optimizer))
        self.state = jax.device_put(state, placement.handles["replicated"])
        self.scaler = jax.device_put({"scale": jnp.float32(INITIAL_SCALE), "good": jnp.int32(0)},
                                     placement.handles["replicated"]) if loss_scaling else None
        graphdef = self.graphdef

        def step(state, scaler, inputs, labels):
            before = jax.tree.leaves(state)
            model, optimizer = nnx.merge(graphdef, state)

            def loss_of(model):
                return loss_fn(model(inputs).astype(jnp.float32), labels)

            if scaler is None:
                loss, grads = nnx.value_and_grad(loss_of)(model)
                optimizer.update(model, grads)
                return nnx.state((model, optimizer)), None, loss

            def scaled(model):
                loss = loss_of(model)
                return loss * scaler["scale"], loss

            (_, loss), grads = nnx.value_and_grad(scaled, has_aux=True)(model)
            grads = jax.tree.map(lambda g: g / scaler["scale"], grads)
            finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
            optimizer.update(model, grads)
            after, tree = jax.tree.flatten(nnx.state((model, optimizer)))
            # a step of non-finite gradients is skipped: the state as it was
            kept = jax.tree.unflatten(tree, [jnp.where(finite, a, b) for a, b in zip(after, before)])
            return kept, loss_scale_update(scaler, finite), loss

        self.step = jax.jit(step, donate_argnums=0)

    def __call__(self, inputs, labels):
        self.state, self.scaler, loss = self.step(self.state, self.scaler, inputs, labels)
        hold(self.placement, loss)
        return loss

    def model_state(self):
        return self.state[0]

    def set_learning_rate(self, learning_rate):
        hyper = self.state[1]["opt_state"]["hyperparams"]["learning_rate"]
        hyper.set_value(jax.device_put(np.asarray(learning_rate, dtype=hyper.get_value().dtype),
                                       self.placement.handles["replicated"]))


class WorkloadMethods:
    """What every JAX workload module does the same way with its self.model (a Flax NNX module,
    channels last) and, once build_training has made it, self.training (`Training`):
    predictions in inference mode (batch norm with its running statistics), the parameter count,
    and loading PyTorch's state dict (`torch_to_flax`).

    Subclasses set input_dtype and may override to_model_layout(inputs) (e.g. NCHW -> NHWC)."""

    input_dtype = "float32"
    training = None

    def to_model_layout(self, inputs):
        return inputs

    def _inference(self):
        from flax import nnx

        if getattr(self, "_infer", None) is None:
            graphdef = nnx.graphdef(nnx.view(self.model, use_running_average=True, raise_if_not_found=False))

            def infer(state, inputs):
                return nnx.merge(graphdef, state)(inputs).astype(jnp.float32)

            self._infer = jax.jit(infer)
        return self._infer

    def predict(self, inputs):
        return np.asarray(self._inference()(*self._inference_arguments(inputs)))

    def precision_ops(self, inputs):
        """The compute operations of the prediction's forward pass as XLA compiled it (forward_ops:
        its optimised HLO), and whether the training loss is scaled. Compiled for the arguments'
        shapes, dtypes and shardings on this process's devices (XLA's program does not depend on their
        values): across processes, before the first step, process 0 cannot read the state alone."""
        from flax import nnx

        handles = self.placement.handles
        state = self.training.model_state() if self.training is not None else nnx.state(self.model)
        state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=handles["local_replicated"]),
                             state)
        inputs = self._model_inputs(inputs)
        batch = jax.ShapeDtypeStruct(inputs.shape, inputs.dtype, sharding=self._inputs_sharding(inputs))
        scaled = self.training is not None and self.training.scaler is not None
        return forward_ops(self._inference(), state, batch), scaled

    def _model_inputs(self, inputs):
        return np.ascontiguousarray(self.to_model_layout(inputs.astype(self.input_dtype, copy=False)))

    def _inputs_sharding(self, inputs):
        """Split over this process's devices where the batch divides evenly, else every device reads it all."""
        handles = self.placement.handles
        divides = len(inputs) % self.placement.local_devices == 0
        return handles["local_batch"] if divides else handles["local_replicated"]

    def _inference_arguments(self, inputs):
        """The state and the inputs of a prediction, on this process's devices (all of a one-process
        run's): process 0 evaluates alone, on its replica of the training state."""
        from flax import nnx

        inputs = self._model_inputs(inputs)
        if self.training is not None:
            state = local_replica(self.training.model_state(), self.placement)
        else:
            state = jax.device_put(nnx.state(self.model), self.placement.handles["local_replicated"])
        return state, jax.device_put(inputs, self._inputs_sharding(inputs))

    def parameter_count(self):
        return parameters(self.model)

    def load_weights(self, weights):
        """Before build_training (the parity test builds the model only)."""
        if self.training is not None:
            raise RuntimeError("load_weights before build_training: the training state is a copy of the model")
        torch_to_flax(self.model, self.torch_weights(weights))

    def torch_weights(self, weights):
        """PyTorch's state dict with the workload's own renames and layout changes (the generic
        conversion of torch_to_flax takes the rest)."""
        return weights
