"""The same model in every framework, shown by outputs: load one set of weights, predict; and
the same training, shown by losses: from the shared start, the same first steps.

    python -m dlbench.parity TASKS.json

TASKS.json is a list of tasks, each a run spec of one device ("spec", as dlbench.specs writes
it) and what to do with it:

    {"do": "forward", "spec": {...}, "inputs": "X.npy", "weights": "W.npz", "out": "Y.npy"}
    {"do": "dump-weights", "spec": {...}, "out": "W.npz"}
    {"do": "train", "spec": {...}, "steps": K, "out": "L.npy"}

They run in order in this one interpreter, of one framework's environment, so that the
framework is imported once. What a framework fixes when its runtime starts must be the same
in every task of a batch: the threads and the CPU device count (JAX's configure and
TensorFlow's setup refuse a change); give tasks that differ there their own batch. After each
task, one line on stdout: {"task": its index, "parameters": the model's trainable parameter
count} ("initial_weights" too for train, and "precision", the record's proof of the precision it
trained in, dlbench.precision), or {"task": its index, "error": the traceback}; a
failed task does not stop the others, and the exit status is 1 if any failed.

forward: the weights are PyTorch's state dict as numpy arrays (PyTorch's names and layouts are
the reference); each framework's workload module converts them in load_weights (NCHW to NHWC
kernels, LSTM gate layouts, one bias or two); the outputs of the inputs (PyTorch's layout) are
written to "out". dump-weights (PyTorch only): the model keeps its seeded initialisation and
writes it (its state dict) to "out".

train: the workload is built as a run builds it (its data, relative to the working directory,
e.g. the smoke preset's; the shared initial weights, dlbench.weights), then trains K optimizer
steps on the first K batches of epoch 1's shared order and writes the K losses to "out"
(`train_losses`).
"""
import argparse
import gc
import json
import sys
import traceback

import numpy as np

from dlbench import precision
from dlbench.clock import run_order
from dlbench.contract import OwnLoop
from dlbench.protocol import adapter_of, workload_class
from dlbench.specs import spec_from_dict


def workload_for(spec):
    """The spec's workload in its framework on the CPU, not built."""
    adapter = adapter_of(spec)
    adapter.configure(spec)
    return workload_class(spec)(spec, adapter.setup(spec, "cpu", 0), adapter)


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
    if isinstance(workload, OwnLoop):  # Keras: model.fit over the workload's own input, one step an epoch
        from dlbench.frameworks.keras.loaders import fit_input

        workload.train_data.set_run(order, epochs)
        history = workload.model.fit(fit_input(workload), epochs=steps, steps_per_epoch=1, shuffle=False, verbose=0)
        return [float(loss) for loss in history.history["loss"]]
    losses = []
    for batch in workload.batches(order, epochs):
        losses.append(workload.adapter.to_float(workload.train_step(batch)))
        if len(losses) == steps:
            break
    return losses


def forward(spec, inputs, weights, out):
    workload = model_for(spec)
    with np.load(weights) as arrays:
        workload.load_weights({name: arrays[name] for name in arrays.files})
    np.save(out, workload.predict(np.load(inputs)))
    workload.adapter.teardown(workload.placement)
    return {"parameters": workload.parameter_count()}


def dump_weights(spec, out):
    if spec.framework != "pytorch":
        raise ValueError("dump-weights: PyTorch's state dict is the reference layout")
    workload = model_for(spec)
    np.savez(out, **{k: v.detach().cpu().numpy() for k, v in workload.model.state_dict().items()})
    workload.adapter.teardown(workload.placement)
    return {"parameters": workload.parameter_count()}


def train(spec, steps, out):
    workload = workload_for(spec)
    workload.build()
    # the proof of the run's precision, as the protocol takes it: after the build, before the first step
    measured = {"precision": precision.measure(spec, workload)} if spec.precision else {}
    np.save(out, np.asarray(train_losses(workload, steps), dtype=np.float64))
    workload.adapter.teardown(workload.placement)
    return {"parameters": workload.parameter_count(), "initial_weights": workload.initial_weights, **measured}


TASKS = {"forward": forward, "dump-weights": dump_weights, "train": train}


def run(task):
    """One task's result (its arguments are the task's keys but "do" and "spec")."""
    arguments = {key: value for key, value in task.items() if key not in ("do", "spec")}
    if task.get("do") not in TASKS:
        raise ValueError(f"task: do must be one of {', '.join(TASKS)}, got {task.get('do')!r}")
    return TASKS[task["do"]](spec_from_dict(task["spec"]), **arguments)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", help="the tasks (a JSON file: a list)")
    args = parser.parse_args()
    with open(args.tasks) as f:
        tasks = json.load(f)
    failed = False
    for index, task in enumerate(tasks):
        try:
            result = run(task)
        except Exception:  # the other tasks still run; the caller reads which failed
            traceback.print_exc()
            result, failed = {"error": traceback.format_exc()}, True
        print(json.dumps({"task": index, **result}), flush=True)
        gc.collect()  # the task's model and data, before the next task builds its own
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
