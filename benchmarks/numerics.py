"""What flushing denormals costs or saves: train steps timed with and without it, interleaved.

    python benchmarks/numerics.py [--rounds 5] [--steps 20] [--densenet-steps 5] [--out numerics.csv]
        PyTorch on the IMDB LSTM (batch 64, --maxlen tokens (100), vocabulary 5000, embedding and
        hidden 128) and DenseNet-121 (batch 4, 224x224, 14 outputs), random data: denormals flushed
        or not (dlbench.numerics) x oneDNN (torch.backends.mkldnn) on or off x 1 or 2 threads.
    python benchmarks/numerics.py --frameworks pytorch,mxnet,keras-torch [--rounds 5] ...
        the IMDB LSTM step in each framework, flush against framework-default.

Every measurement is a fresh process in the framework's environment (the venv of
envs/<framework>.yaml), which applies the policy as the training process does (first, before
the framework is imported), sets the framework up with the project's adapter (threads, and
PyTorch's set_flush_denormal under flush), builds the workload module's model, runs warm-up
steps, then times `steps` steps (the device queue drained before the clock stops) and
reports seconds per step and what the framework's probe says (flushes or not). Rounds run
every variant once, round robin, each round starting one variant later, so that drift of the
machine falls on all of them. Prints the CPU, then per variant the median seconds per step
over the rounds with the min-max and the interquartile range, then the ratio
framework-default / flush (above 1: flushing is faster), the median of the per-round ratios.
Run it on a quiet machine: it measures the machine as much as the frameworks.
"""
import argparse
import csv
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from dlbench import numerics  # noqa: E402
from dlbench.machine import cpu, cpu_line
from dlbench.numerics_probe import probe_spec  # noqa: E402

# The default shapes of the workloads (config.yaml): IMDB batch 64 over 100 tokens, DenseNet-121 batch 4.
LSTM = {"vocabulary": 5000, "embedding": 128, "hidden": 128, "maxlen": 100, "classes": 2, "batch": 64, "lr": 1e-3}
DENSENET = {"batch": 4, "size": 224, "classes": 14, "lr": 1e-4}
FRAMEWORK_MODELS = {"pytorch": ("lstm", "densenet"), "mxnet": ("lstm",), "keras-torch": ("lstm",)}


# --- the measured process ------------------------------------------------------------------------

def pytorch_step(model, mkldnn):
    import torch
    from torch import nn

    if mkldnn is not None:  # else as PyTorch ships (on)
        torch.backends.mkldnn.enabled = mkldnn
    torch.manual_seed(0)
    if model == "lstm":
        from dlbench.workloads.imdb.definition import LstmModel
        from dlbench.workloads.imdb.pytorch import build_model

        net = build_model(LstmModel(*(LSTM[k] for k in ("vocabulary", "embedding", "hidden", "maxlen", "classes"))))
        inputs = torch.randint(0, LSTM["vocabulary"], (LSTM["batch"], LSTM["maxlen"]))
        labels = torch.randint(0, LSTM["classes"], (LSTM["batch"],))
        loss_fn, lr = nn.CrossEntropyLoss(), LSTM["lr"]
    else:
        from dlbench.workloads.chestxray.definition import DENSENET121
        from dlbench.workloads.chestxray.pytorch import build_model

        net = build_model(DENSENET121)
        inputs = torch.randn(DENSENET["batch"], 3, DENSENET["size"], DENSENET["size"])
        labels = (torch.rand(DENSENET["batch"], DENSENET["classes"]) < 0.2).float()
        loss_fn, lr = nn.BCEWithLogitsLoss(), DENSENET["lr"]
    optimizer = torch.optim.Adam(net.parameters(), lr=lr, eps=1e-7)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(net(inputs), labels).backward()
        optimizer.step()

    return step, lambda: None  # the CPU computes synchronously


def mxnet_step(placement, adapter):
    import mxnet as mx
    import numpy as np
    from mxnet import gluon

    from dlbench.spec_types import Adam
    from dlbench.workloads.imdb.mxnet import build_model

    mx.random.seed(0)
    ctx = adapter.contexts(placement)[0]
    net = build_model(LSTM["vocabulary"], LSTM["embedding"], LSTM["hidden"], LSTM["classes"])
    net.initialize(mx.init.Xavier(), ctx=ctx)
    net.hybridize(static_alloc=True)  # as the workload module
    trainer = adapter.make_trainer(net.collect_params(), Adam(LSTM["lr"], 0.9, 0.999, 1e-7), placement)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    rng = np.random.default_rng(0)
    tokens = mx.nd.array(rng.integers(0, LSTM["vocabulary"], (LSTM["batch"], LSTM["maxlen"])), ctx=ctx, dtype="int32")
    labels = mx.nd.array(rng.integers(0, LSTM["classes"], LSTM["batch"]), ctx=ctx, dtype="float32")

    def step():
        adapter.train_step(net, loss_fn, trainer, placement, tokens, labels)

    return step, mx.nd.waitall  # the engine is asynchronous


def keras_step():
    import keras
    import numpy as np

    from dlbench.workloads.imdb.keras import build_model

    keras.utils.set_random_seed(0)
    model = build_model(*(LSTM[k] for k in ("vocabulary", "embedding", "hidden", "maxlen", "classes")))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=LSTM["lr"], epsilon=1e-7),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, LSTM["vocabulary"], (LSTM["batch"], LSTM["maxlen"])).astype(np.int32)
    labels = rng.integers(0, LSTM["classes"], LSTM["batch"]).astype(np.int32)

    def step():
        model.train_on_batch(tokens, labels)

    return step, lambda: None  # train_on_batch returns the loss on the host


def measure(args):
    """One variant in this process: the policy first, as dlbench.protocol.main applies it."""
    spec = probe_spec(args.framework, args.policy, args.threads)
    numerics.apply(spec.numerics)
    from dlbench.protocol import adapter_of

    adapter = adapter_of(spec)
    adapter.configure(spec)
    placement = adapter.setup(spec, "cpu", 0)
    if args.framework == "pytorch":
        step, sync = pytorch_step(args.model, {"on": True, "off": False}.get(args.mkldnn))
    elif args.framework == "mxnet":
        step, sync = mxnet_step(placement, adapter)
    else:
        step, sync = keras_step()
    for _ in range(args.warmup):
        step()
    sync()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    sync()
    seconds = time.perf_counter() - start
    print(json.dumps({"s_per_step": seconds / args.steps, "framework_flushes": adapter.flushes_denormals()}),
          flush=True)
    os._exit(0)  # frameworks may leave non-daemon threads behind


# --- the driver ------------------------------------------------------------------------------------

def interpreter(framework):
    from dlbench.envs import env_hash

    prefix = Path(os.environ.get("DLBENCH_VENV_PREFIX", "~/.cache/dlbench/venvs")).expanduser()
    python = prefix / f"{framework}-{env_hash(REPO / 'envs' / f'{framework}.yaml')}" / "python"
    if not python.exists():
        raise SystemExit(f"no venv for {framework} at {python}: build it (snakemake --cores all builds them all)")
    return str(python)


def variants(args):
    """Dicts of framework, model, policy, mkldnn and threads: the PyTorch study, or one LSTM per framework."""
    if args.frameworks:
        return [{"framework": framework, "model": "lstm", "policy": policy, "mkldnn": "default", "threads": threads}
                for framework, policy, threads in itertools.product(args.frameworks, numerics.POLICIES, args.threads)]
    return [{"framework": "pytorch", "model": model, "policy": policy, "mkldnn": mkldnn, "threads": threads}
            for model, mkldnn, threads, policy in itertools.product(args.models, ("on", "off"), args.threads,
                                                                   numerics.POLICIES)]


def run_variant(variant, args):
    steps = args.densenet_steps if variant["model"] == "densenet" else args.steps
    command = [interpreter(variant["framework"]), __file__, "--measure", *(f"--{k}={v}" for k, v in variant.items()),
               f"--steps={steps}", f"--warmup={args.warmup}", f"--maxlen={args.maxlen}"]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                              str(REPO / "src"), os.environ.get("PYTHONPATH")]))})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{variant} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def name(variant):
    mkldnn = "" if variant["mkldnn"] == "default" else f" mkldnn={variant['mkldnn']}"
    return f"{variant['framework']} {variant['model']} threads={variant['threads']}{mkldnn}"


def quartiles(values):
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def report(runs, rounds):
    """Per variant: median s/step, min-max, IQR; per pair: framework-default / flush."""
    by_variant = {}
    for run in runs:
        by_variant.setdefault(tuple(sorted(run["variant"].items())), []).append(run)
    print(f"\n{'variant':44} {'numerics':18} {'median s/step':>13} {'min-max':>17} {'IQR':>17} flushes")
    for key, found in by_variant.items():
        variant = dict(key)
        times = [r["s_per_step"] for r in found]
        q1, q3 = quartiles(times)
        flushes = sorted({r["framework_flushes"] for r in found})
        print(f"{name(variant):44} {variant['policy']:18} {statistics.median(times):13.4f} "
              f"{min(times):8.4f}-{max(times):<8.4f} {q1:8.4f}-{q3:<8.4f} {'/'.join(map(str, flushes))}")
    print(f"\nframework-default / flush, seconds per step (above 1: flushing is faster), median over {rounds} "
          "round(s) of the per-round ratio, with its min-max:")
    pairs = {}
    for run in runs:
        variant = {k: v for k, v in run["variant"].items() if k != "policy"}
        pairs.setdefault(tuple(sorted(variant.items())), {}).setdefault(run["round"], {})[run["variant"]["policy"]] = \
            run["s_per_step"]
    for key, per_round in pairs.items():
        ratios = [times["framework-default"] / times["flush"] for times in per_round.values() if len(times) == 2]
        if ratios:
            print(f"  {name(dict(key)):44} {statistics.median(ratios):6.3f} ({min(ratios):.3f}-{max(ratios):.3f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", type=lambda s: s.split(","),
                        help="comma-separated: the IMDB LSTM step in each (of pytorch, mxnet, keras-torch), flush "
                             "against framework-default; left out, the PyTorch study")
    parser.add_argument("--models", type=lambda s: s.split(","), default=["lstm", "densenet"],
                        help="the PyTorch study's models (lstm, densenet)")
    parser.add_argument("--threads", type=lambda s: [int(t) for t in s.split(",")], default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="timed LSTM steps per measurement")
    parser.add_argument("--densenet-steps", type=int, default=5, help="timed DenseNet-121 steps per measurement")
    parser.add_argument("--warmup", type=int, default=3, help="steps before the clock")
    parser.add_argument("--maxlen", type=int, default=LSTM["maxlen"], help="tokens per review in the LSTM step")
    parser.add_argument("--out", type=Path, help="write every measurement here (CSV)")
    # one measurement, in the framework's environment (the driver runs these)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--framework", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--policy", help=argparse.SUPPRESS)
    parser.add_argument("--mkldnn", help=argparse.SUPPRESS)
    args = parser.parse_args()
    LSTM["maxlen"] = args.maxlen
    if args.measure:
        args.threads = args.threads[0]
        return measure(args)
    unknown = set(args.frameworks or ()) - set(FRAMEWORK_MODELS)
    if unknown or not set(args.models) <= {"lstm", "densenet"}:
        raise SystemExit(f"frameworks: {', '.join(FRAMEWORK_MODELS)}; models: lstm, densenet")

    print(f"CPU: {cpu_line(cpu())}; flags: {' '.join(cpu()['flags'])}", flush=True)
    todo = variants(args)
    runs = []
    for round_ in range(1, args.rounds + 1):
        shift = (round_ - 1) % len(todo)  # round robin: each round starts one variant later
        for variant in todo[shift:] + todo[:shift]:
            result = run_variant(variant, args)
            runs.append({"round": round_, "variant": variant, **result})
            print(f"round {round_}: {name(variant):44} {variant['policy']:18} {result['s_per_step']:.4f} s/step "
                  f"(framework flushes: {result['framework_flushes']})", flush=True)
    if args.out:
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, ["round", "framework", "model", "policy", "mkldnn", "threads", "s_per_step",
                                        "framework_flushes"])
            writer.writeheader()
            for run in runs:
                writer.writerow({"round": run["round"], **run["variant"], "s_per_step": run["s_per_step"],
                                 "framework_flushes": run["framework_flushes"]})
    report(runs, args.rounds)


if __name__ == "__main__":
    main()
