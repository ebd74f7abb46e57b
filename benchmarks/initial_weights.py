"""How long drawing a model's initial weights takes (dlbench.weights.initial_weights, which every run
does before its framework loads them): the default config's first spec of each workload with a
model, and DenseNet-121 (727 arrays, 7.1 M numbers), each drawn --rounds times; prints the
median and the range (min-max) in seconds, and the arrays and parameters drawn.

    PYTHONPATH=src python benchmarks/initial_weights.py [--rounds 5]

A figure, not a test: tests/test_weights.py checks what is drawn, and once also held DenseNet-121's
draw under 2 s, a bound on the machine's load as much as on the code.
"""
import argparse
import dataclasses
import statistics
import time
from pathlib import Path

from dlbench.config import load_config
from dlbench.definitions import run_set
from dlbench.weights import initial_weights
from dlbench.workloads.chestxray.definition import DENSENET121, densenet_name

REPO = Path(__file__).resolve().parents[1]


def specs(config):
    """(name, spec) of each workload's first PyTorch spec with a model, and DenseNet-121's."""
    found = []
    for workload in ("mnist", "imdb", "chestxray"):
        spec = run_set(workload).build(config, run_set(workload).rows(config, ["pytorch"], 1)[0], 1)
        found.append((f"chestxray ({densenet_name(spec.model)})" if workload == "chestxray" else workload, spec))
    chest = found[-1][1]
    found.append((densenet_name(DENSENET121), dataclasses.replace(chest, model=DENSENET121)))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    config = load_config(REPO / "config.yaml")
    print(f"{'model':<28} {'arrays':>7} {'parameters':>11} {'median s':>9}  range s")
    for name, spec in specs(config):
        seconds = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            weights = initial_weights(spec)
            seconds.append(time.perf_counter() - start)
        parameters = sum(array.size for array in weights.values())
        print(f"{name:<28} {len(weights):>7} {parameters:>11,} {statistics.median(seconds):>9.3f}  "
              f"{min(seconds):.3f}-{max(seconds):.3f}")


if __name__ == "__main__":
    main()
