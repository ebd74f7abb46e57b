"""Train a PyTorch model as its training runs do and export it: an ONNX graph, a PyTorch
program, its test inputs and PyTorch's outputs on them (dlbench.studies.onnx.definition).

python export.py --spec SOURCE_SPEC_JSON --opset N --samples N --onnx M.onnx --program M.pt2
                 --inputs X.npy --reference Y.npy
"""
import argparse
import json

import numpy as np
import torch

from dlbench import numerics
from dlbench.clock import run_order
from dlbench.protocol import adapter_of, workload_class
from dlbench.specs import spec_from_dict

MAX_BATCH = 4096  # the exported program's largest batch
EXAMPLE_BATCH = 2  # the example batch of the export (its batch axis is dynamic)


def train(spec):
    """The PyTorch workload of `spec` on the CPU, from the shared start, trained for the spec's
    convergence steps on the run's order (the first steps of every run of that spec); its losses."""
    adapter = adapter_of(spec)
    workload = workload_class(spec)(spec, adapter.setup(spec, "cpu", 0), adapter)
    workload.build()
    steps = spec.convergence.steps
    order, epochs = run_order(workload.n_train, spec.global_batch, spec.seed, max(steps, 1))
    batches = workload.batches(workload.placement.local(order), epochs)
    losses = [adapter.to_float(workload.train_step(batch)) for batch, _ in zip(batches, range(steps))]
    return workload, losses


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, help="the PyTorch training run's spec (JSON)")
    parser.add_argument("--opset", type=int, required=True, help="the ONNX opset to export to")
    parser.add_argument("--samples", type=int, required=True, help="test inputs to write (the first N)")
    for name in ("onnx", "program", "inputs", "reference"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    spec = spec_from_dict(json.loads(args.spec))
    numerics.apply(spec.numerics)
    workload, losses = train(spec)
    model = workload.model.eval()
    inputs = np.ascontiguousarray(workload.test_inputs()[:args.samples])
    example = torch.from_numpy(inputs[:EXAMPLE_BATCH])
    torch.onnx.export(model, (example,), args.onnx, dynamo=False, opset_version=args.opset,
                      input_names=["inputs"], output_names=["outputs"],
                      dynamic_axes={"inputs": {0: "batch"}, "outputs": {0: "batch"}},
                      # the initialisers listed as graph inputs too, as MXNet's importer reads them
                      keep_initializers_as_inputs=True)
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    torch.export.save(torch.export.export(model, (example,), dynamic_shapes=({0: batch},)), args.program)
    with torch.inference_mode():
        reference = np.concatenate([model(torch.from_numpy(inputs[i:i + 64])).numpy()
                                    for i in range(0, len(inputs), 64)])
    np.save(args.inputs, inputs)
    np.save(args.reference, reference)
    print(json.dumps({"model": spec.run_set, "opset": args.opset, "train_steps": len(losses),
                      "loss": [losses[0], losses[-1]] if losses else None, "test_inputs": len(inputs)}))


if __name__ == "__main__":
    main()
