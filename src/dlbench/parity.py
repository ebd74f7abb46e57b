"""The same model in every framework, shown by outputs: load one set of weights, predict.

    python -m dlbench.parity SPEC_FILE --inputs X.npy --out Y.npy (--weights W.npz | --dump-weights W.npz)

prints {"parameters": the model's trainable parameter count} as its last line.

Runs in one framework's environment. The weights are PyTorch's state dict as numpy arrays
(PyTorch's names and layouts are the reference); each framework's workload module converts
them in load_weights (NCHW to NHWC kernels, LSTM gate layouts, one bias or two). With
--dump-weights (PyTorch only) the model keeps its seeded initialisation and writes it.
"""
import argparse
import json

import numpy as np

from dlbench.protocol import backend_of, workload_class
from dlbench.specs import spec_from_dict


def model_for(spec):
    """The spec's workload in its framework, its model built on the CPU (no data, no optimizer)."""
    backend = backend_of(spec)
    if hasattr(backend, "configure"):
        backend.configure(spec)
    workload = workload_class(spec)(spec, backend.setup(spec, "cpu", 0), backend)
    workload.build_model()
    return workload


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="a run spec (JSON file) of one device")
    parser.add_argument("--inputs", required=True, help="a batch of inputs in PyTorch's layout (.npy)")
    parser.add_argument("--out", required=True, help="where to write the outputs (.npy)")
    weights = parser.add_mutually_exclusive_group(required=True)
    weights.add_argument("--weights", help="the weights to load (.npz of PyTorch's state dict)")
    weights.add_argument("--dump-weights", help="write the model's own weights here (.npz; PyTorch only)")
    args = parser.parse_args()
    with open(args.spec) as f:
        spec = spec_from_dict(json.load(f))
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
