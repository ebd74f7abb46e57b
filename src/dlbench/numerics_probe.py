"""The numerics policy applied as the training process applies it, and measured, in one framework,
without a workload (dlbench.numerics):

    python -m dlbench.numerics_probe --framework pytorch --policy flush [--gpu-float32 tf32]

sets the framework up on the CPU and prints the measurement as JSON (tests/test_numerics.py runs
it in every framework's environment; benchmarks/numerics.py starts its variants from probe_spec).
"""
import argparse
import importlib
import json

from dlbench.frameworks import adapter_module
from dlbench.numerics import GPU_FLOAT32, POLICIES, apply, measure
from dlbench.processes import end_process
from dlbench.spec_types import CompileCache, Convergence, Measure, Run


def probe_spec(framework, policy, threads, gpu_float32="highest"):
    """A one-device CPU spec for setting a framework up without a workload (the probe's)."""
    units = Measure(min_unit_seconds=0, min_unit_steps=1, max_unit_steps=1, warmup_tolerance=0.1,
                    max_warmup_units=1, steady_units=1, max_other_cpus=0.0, max_contended_reruns=0)
    return Run(run_set="probe", framework=framework, run_id="probe", repeat=1, seed=0, device_kind="cpu", devices=1, nodes=1,
               strategy="none", mode=None, precision=None, batch=1, threads=threads, measure=units, convergence=Convergence(0, 1),
               timeout_s=60.0, numerics=policy, gpu_float32=gpu_float32,
               compile_cache=CompileCache(directory=None, fill=True), allocator="framework-default", variant=None, duet=None,
               environment=())


def main():
    parser = argparse.ArgumentParser(description="Apply a numerics policy as the training process does and print "
                                                 "what is measured (JSON).")
    parser.add_argument("--framework", required=True)
    parser.add_argument("--policy", choices=POLICIES, required=True)
    parser.add_argument("--gpu-float32", choices=GPU_FLOAT32, default="highest")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    spec = probe_spec(args.framework, args.policy, args.threads, args.gpu_float32)
    apply(spec.numerics)  # as dlbench.protocol.main: before the adapter is imported
    adapter = importlib.import_module(adapter_module(args.framework))
    adapter.configure(spec)
    settings = adapter.gpu_float32(spec.gpu_float32)
    placement = adapter.setup(spec, "cpu", 0)
    print(json.dumps({"framework": args.framework, **measure(spec, adapter, placement, settings)}), flush=True)
    adapter.teardown(placement)
    end_process()  # as the protocol's process


if __name__ == "__main__":
    main()
