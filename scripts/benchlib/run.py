"""The framework side of a run: read the spec, iterate the shared data order, write results.

A framework script calls `main(train)`; `train(run)` reads `run.spec`, trains, and calls
`run.epoch(...)` after each epoch and `run.finish(...)` at the end. Results are flushed
after every epoch, so a crash keeps the epochs that finished.
"""
import argparse
import json
import os
import sys

import numpy as np

from benchlib.record import peak_rss_bytes, write_json


class NotApplicable(Exception):
    """This sweep point has no meaning here (e.g. DataParallel without GPUs)."""


def epoch_batches(n_samples, global_batch, seed, epoch):
    """Index batches of one epoch, the same in every framework: (n_batches, global_batch).

    The order comes from the seed and the epoch number alone; the last partial batch is
    dropped so that every framework and every device count sees the same samples.
    """
    order = np.random.default_rng([seed, epoch]).permutation(n_samples)
    n_batches = n_samples // global_batch
    if n_batches == 0:
        raise ValueError(f"{n_samples} samples make no batch of {global_batch}")
    return order[: n_batches * global_batch].reshape(n_batches, global_batch)


def shard(batch, rank, world_size):
    """This device's contiguous slice of a global batch."""
    per_device = len(batch) // world_size
    return batch[rank * per_device : (rank + 1) * per_device]


def threads_per_process(total_threads, processes):
    return max(1, total_threads // processes)


def resolve_device(requested, gpu_count, devices):
    """'auto' uses GPUs when present. Returns 'gpu' or 'cpu'; N GPUs need N GPUs."""
    if requested not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be auto, cpu or gpu, got {requested!r}")
    kind = "gpu" if requested == "gpu" or (requested == "auto" and gpu_count > 0) else "cpu"
    if kind == "gpu" and gpu_count < devices:
        raise NotApplicable(f"{devices} GPUs asked for, this machine has {gpu_count}")
    return kind


class Run:
    def __init__(self, spec, result_path):
        self.spec = spec
        self.result_path = result_path
        self.result = {"status": "running", "epochs": []}

    def _flush(self):
        write_json(self.result_path, self.result)

    def describe(self, framework_version, device, threads, **extra):
        """What ran: framework version, device kind and count, thread settings."""
        self.result.update(framework_version=framework_version, device=device, threads=threads, **extra)
        self._flush()

    def epoch(self, epoch, wall_s, samples, loss, metric=None, eval_s=None, **extra):
        self.result["epochs"].append(
            {"epoch": epoch, "wall_s": wall_s, "samples": samples, "loss": None if loss is None else float(loss),
             "metric": metric or {}, "eval_s": eval_s, **extra}
        )
        self._flush()
        print(f"epoch {epoch}: {wall_s:.2f} s, {samples} samples, loss {loss}, {metric}", flush=True)

    def finish(self, peak_rss=None, peak_gpu_bytes=None, **extra):
        self.result.update(
            status="ok",
            memory={"peak_rss_bytes": peak_rss or peak_rss_bytes(), "peak_gpu_bytes": peak_gpu_bytes},
            **extra,
        )
        self._flush()

    def not_applicable(self, reason):
        self.result.update(status="not_applicable", reason=reason)
        self._flush()


def main(train, count_parameters):
    """Entry point of a framework script: train a spec, or count a model's parameters."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", help="the run's spec, a JSON file")
    parser.add_argument("--result", help="where to write results")
    parser.add_argument("--count-parameters", metavar="MODEL",
                        help="print the trainable parameter count of MODEL and exit")
    args = parser.parse_args()
    if args.count_parameters:
        print(count_parameters(args.count_parameters))
        return
    if not (args.spec and args.result):
        parser.error("--spec and --result are needed to train")
    with open(args.spec) as f:
        spec = json.load(f)
    run = Run(spec, args.result)
    try:
        train(run)
    except NotApplicable as reason:
        run.not_applicable(str(reason))
        print(f"not applicable: {reason}", file=sys.stderr)
    sys.stdout.flush()
    # Frameworks may leave non-daemon threads behind (TF's gRPC workers); the result is written.
    os._exit(0)
