"""The same model in every framework, shown by outputs: load one set of weights, predict; and
the same training, shown by losses: from the shared start, the same first steps.

    python -m dlbench.parity SPEC_FILE --inputs X.npy --out Y.npy (--weights W.npz | --dump-weights W.npz)
    python -m dlbench.parity SPEC_FILE --train-steps K --losses-out L.npy

prints {"parameters": the model's trainable parameter count, ...} as its last line.

Runs in one framework's environment. The weights are PyTorch's state dict as numpy arrays
(PyTorch's names and layouts are the reference); each framework's workload module converts
them in load_weights (NCHW to NHWC kernels, LSTM gate layouts, one bias or two). With
--dump-weights (PyTorch only) the model keeps its seeded initialisation and writes it.

With --train-steps the workload is built as a run builds it (its data, relative to the working
directory, e.g. the smoke preset's; the shared initial weights, dlbench.weights), then trains K
optimizer steps on the first K batches of epoch 1's shared order and writes the K losses
(`train_losses`).
"""
import argparse
import json

import numpy as np

from dlbench.clock import run_order
from dlbench.protocol import backend_of, workload_class
from dlbench.specs import spec_from_dict


def workload_for(spec):
    """The spec's workload in its framework on the CPU, not built."""
    backend = backend_of(spec)
    if hasattr(backend, "configure"):
        backend.configure(spec)
    return workload_class(spec)(spec, backend.setup(spec, "cpu", 0), backend)


def model_for(spec):
    """The spec's workload in its framework, its model built on the CPU (no data, no optimizer)."""
    workload = workload_for(spec)
    workload.build_model()
    return workload


def train_losses(workload, steps):
    """The loss of each of the first `steps` optimizer steps of a built workload, on the first
    `steps` batches of the run's order (the same in every framework), each read on the host."""
    spec = workload.spec
    order, epochs = run_order(workload.n_train, spec.global_batch, spec.seed, steps)
    order = workload.placement.local(order)
    if hasattr(workload, "fit"):  # Keras: model.fit over the workload's own input, one step an epoch
        from dlbench.frameworks.keras.loaders import fit_input

        workload.train_data.set_run(order, epochs)
        history = workload.model.fit(fit_input(workload), epochs=steps, steps_per_epoch=1, shuffle=False, verbose=0)
        return [float(loss) for loss in history.history["loss"]]
    losses = []
    for batch in workload.batches(order, epochs):
        losses.append(workload.backend.to_float(workload.train_step(batch)))
        if len(losses) == steps:
            break
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="a run spec (JSON file) of one device")
    parser.add_argument("--inputs", help="a batch of inputs in PyTorch's layout (.npy)")
    parser.add_argument("--out", help="where to write the outputs (.npy)")
    weights = parser.add_mutually_exclusive_group()
    weights.add_argument("--weights", help="the weights to load (.npz of PyTorch's state dict)")
    weights.add_argument("--dump-weights", help="write the model's own weights here (.npz; PyTorch only)")
    parser.add_argument("--train-steps", type=int, help="train this many steps from the shared start")
    parser.add_argument("--losses-out", help="where to write the losses of --train-steps (.npy)")
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = spec_from_dict(json.load(f))
    if args.train_steps:
        if not args.losses_out:
            parser.error("--train-steps needs --losses-out")
        workload = workload_for(spec)
        workload.build()
        np.save(args.losses_out, np.asarray(train_losses(workload, args.train_steps), dtype=np.float64))
        workload.backend.teardown(workload.placement)
        print(json.dumps({"parameters": workload.parameter_count(), "initial_weights": workload.initial_weights}))
        return
    if not (args.inputs and args.out and (args.weights or args.dump_weights)):
        parser.error("give --inputs, --out and --weights or --dump-weights (or --train-steps)")
    workload = model_for(spec)
    if args.dump_weights:
        if spec.framework != "pytorch":
            parser.error("--dump-weights: PyTorch's state dict is the reference layout")
        np.savez(args.dump_weights, **{k: v.detach().cpu().numpy() for k, v in workload.model.state_dict().items()})
    else:
        with np.load(args.weights) as arrays:
            workload.load_weights({name: arrays[name] for name in arrays.files})
    np.save(args.out, workload.predict(np.load(args.inputs)))
    print(json.dumps({"parameters": workload.parameter_count()}))


if __name__ == "__main__":
    main()
