"""The benchmark protocol, written once for every framework: what is timed, and how.

This file is the one to read. A run is one training process, or one group of data-parallel
processes, for one point of a workload's sweep (`dlbench.specs`). Every process runs
`run_process`, which does, for every framework alike:

1. Placement: the framework's backend (`dlbench.frameworks.<name>`) sets this process's
   threads (the run's threads shared by its processes), its devices and its process group.
   The device is resolved the same way for every framework (`resolve_device`): `auto` uses
   GPUs when the machine has them; a framework that cannot see the machine's GPUs stops
   before training, with a message naming it, rather than being compared on the CPU.
2. Build, outside the clock: the workload module (`dlbench.workloads.<workload>.<framework>`)
   builds its model, optimizer, datasets, loaders and loader worker pools (`build`).
3. Epochs. Each epoch's sample order comes from the seed and the epoch number alone
   (`epoch_order`), the same in every framework; each process takes its contiguous slice
   of every global batch (`Placement.local`). Then:
   - `batches(epoch, order)` makes the epoch's iterable of device batches, outside the clock
     (a dataset, a distributed dataset, a sampler set to the epoch);
   - every process waits for the others (`backend.barrier`), and the clock starts
     (`time.perf_counter`);
   - the iteration over the batches starts inside the clock: loading is timed, as the
     training loop of a user would see it; loader workers are already running (started in
     `build`, kept across epochs) in every framework;
   - one `train_step(batch)` per batch; it returns the loss on the device, which is summed
     on the device: no host synchronisation per step;
   - `backend.sync` waits for the device's queued work (or, in JAX, for the epoch's last
     value) and for every process, then the clock stops. The loss is read after that, outside the clock.
   - Evaluation, on the first process only, is timed apart (`eval_s`), with the model's
     predictions as numpy (`predict`) scored by the workload's shared metric code; the
     other processes wait, outside any clock.
   - Around the clock, outside it, the first process reads what the machine did
     (`dlbench.machine`): CPU time stolen from it, used by other processes, used by the run.
   `EpochClock` is this step, written once: the protocol's own loop (`run_epochs`) drives it,
   and so does a framework that owns its loop (Keras' model.fit), from its per-epoch hooks.
4. The first epoch is warm-up (graph tracing, compilation, allocator growth, worker
   start-up): it is recorded and reported apart from the steady epochs, the timed units
   (at least `measurement.steady_units` of them; the statistics are over units and repeats).
5. At the end, the workload's final evaluation (e.g. test AUC), also timed apart.

The harness (`dlbench.harness`) runs all this in a child process with a timeout, samples
memory and utilisation of the whole process tree (loader workers included, the same way for
every framework), and writes the record whatever happens.

A framework backend is a module with these functions (see dlbench/frameworks/pytorch.py):
    configure(spec)                      (optional) process-wide settings that must precede the
                                         framework's start (JAX's CPU device count), called first
    version() -> str                     the framework's version
    visible_gpus() -> int                GPUs this build of the framework can use
    check(spec, device_kind)             raise NotApplicable for a point without meaning here
    launch(spec, target, args)           run target(rank, *args) in each process of the run
    setup(spec, device_kind, rank) -> Placement
    barrier(placement)                   every process of the run reaches this point
    sync(placement, pending)             the device's queued work is done, in every process;
                                         pending: the epoch's last device value (the loss sum)
    to_float(value) -> float             a device scalar on the host
    mean_over_processes(x, placement) -> float
    gpu_allocator_peak(placement) -> {measure: bytes} or {}   the allocator's own peak
    describe(placement) -> dict          device names and thread settings, for the record; under
                                         framework_cpu, what the framework says it uses on the CPU
    flushes_denormals() -> bool          a denormal times one, in the framework's own ops and
                                         threads, comes out zero (dlbench.numerics)
    teardown(placement)
"""
import importlib
import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlbench import numerics
from dlbench.frameworks import backend_module, workload_module
from dlbench.machine import CpuMeter
from dlbench.processes import die_with_parent, kill_group
from dlbench.record import gpus, write_json
from dlbench.specs import spec_from_dict, spec_to_dict


TEMPORARY_PREFIX = ".dlbench-"  # the harness's folder for a run's spec and results


class NotApplicable(Exception):
    """This sweep point has no meaning here (e.g. DataParallel without GPUs)."""


class FrameworkError(RuntimeError):
    """The framework cannot run this point as asked (e.g. it cannot see the machine's GPUs)."""


def epoch_order(n_samples, global_batch, seed, epoch):
    """Index batches of one epoch, the same in every framework: (n_batches, global_batch).

    The order comes from the seed and the epoch number alone; the last partial batch is
    dropped so that every framework and every device count sees the same samples.
    """
    order = np.random.default_rng([seed, epoch]).permutation(n_samples)
    n_batches = n_samples // global_batch
    if n_batches == 0:
        raise ValueError(f"{n_samples} samples make no batch of {global_batch}")
    return order[: n_batches * global_batch].reshape(n_batches, global_batch)


def shard(batch, part, parts):
    """Part `part` of `parts` contiguous, equal slices of a batch (a device's share)."""
    size = len(batch) // parts
    return batch[part * size: (part + 1) * size]


def resolve_device(framework, requested, visible_gpus, machine_gpus, devices):
    """'gpu' or 'cpu' for a run of `devices` devices, the same rule for every framework.

    auto uses GPUs when the machine has any. A framework that sees fewer GPUs than the
    machine has (a CPU-only build, missing CUDA libraries) would be compared on the CPU
    against others on the GPU: that is an error naming the framework, not a silent fallback.
    """
    if requested not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be auto, cpu or gpu, got {requested!r}")
    if requested == "cpu" or (requested == "auto" and machine_gpus == 0):
        return "cpu"
    if visible_gpus < machine_gpus or visible_gpus == 0:
        raise FrameworkError(
            f"{framework} sees {visible_gpus} GPU(s) but this machine has {machine_gpus}: its build in "
            f"this environment cannot use them (device: {requested}); set device: cpu to compare on CPUs")
    if visible_gpus < devices:
        raise NotApplicable(f"{devices} GPUs asked for, this machine has {visible_gpus}")
    return "gpu"


@dataclass
class Placement:
    """Where one process of a run computes."""
    rank: int                # this process, 0..processes-1; rank 0 evaluates and reports
    processes: int           # processes of the run (DistributedDataParallel ranks, TF workers)
    device_kind: str         # cpu or gpu
    local_devices: int       # devices (replicas) this process drives
    threads: int             # CPU threads of this process
    handles: dict = field(default_factory=dict)  # the framework's own objects (device, strategy, contexts)

    def local(self, order):
        """This process's contiguous slice of every global batch: (n_batches, local batch)."""
        return np.stack([shard(batch, self.rank, self.processes) for batch in order])


class Workload:
    """A workload in one framework: the task's shared part (a subclass per workload in
    dlbench/workloads/<workload>/__init__.py: data, metrics) and the framework's part (a
    subclass of that in dlbench/workloads/<workload>/<framework>.py, named WORKLOAD there).

    `build` runs outside the clock: the task's load_data(), then the framework's
    build_model() and build_training().

    The framework's part implements:
        build_model()              self.model, initialised from the seed
        build_training()           optimizer, loaders (and their worker pools), wrappers
        batches(epoch, order)      an iterable of this process's device batches of `order`
                                   (the process's index batches); iterated inside the clock
        train_step(batch)          one step; returns the loss on the device (None: no loss)
        predict(inputs)            numpy inputs -> numpy outputs, in inference mode
        parameter_count()          trainable parameters of self.model
        load_weights(weights)      {name: numpy array} in PyTorch's names and layouts, the
                                   conversion this framework needs (the parity test)
    and may implement the classmethod check(spec, device_kind), which raises NotApplicable
    for a point without meaning in this framework.

    A framework whose idiom is its own training loop (Keras' model.fit) implements instead of
    batches and train_step:
        fit(clock)                 train spec.epochs epochs, calling the EpochClock's begin,
                                   start and stop from the loop's per-epoch hooks

    The task's part implements:
        load_data()                the arrays or file lists; sets self.n_train
        evaluate() -> {metric: value}          after every epoch (first process only)
        and may implement epoch_info(epoch) (e.g. the learning rate of the epoch, which the
        framework applies in batches()) and final_evaluation() (at the end).
    """

    def __init__(self, spec, placement, backend):
        self.spec, self.placement, self.backend = spec, placement, backend

    @classmethod
    def check(cls, spec, device_kind):
        """Raise NotApplicable where this framework gives the point no meaning."""

    def build(self):
        self.load_data()
        self.build_model()
        self.build_training()

    def epoch_info(self, epoch):
        return {}

    def final_evaluation(self):
        return {}


class Results:
    """What the first process reports, flushed after every epoch so that a crash keeps the
    epochs that finished."""

    def __init__(self, path):
        self.path = path
        self.data = {"status": "running", "epochs": []}

    def update(self, **values):
        self.data.update(values)
        write_json(self.path, self.data)

    def epoch(self, **values):
        self.data["epochs"].append(values)
        write_json(self.path, self.data)
        print(f"epoch {values['epoch']}: {values['wall_s']:.2f} s, loss {values['loss']}, {values['metric']}",
              flush=True)


def workload_class(spec):
    module = importlib.import_module(workload_module(spec.workload, spec.framework))
    return module.WORKLOAD


def backend_of(spec):
    return importlib.import_module(backend_module(spec.framework))


class EpochClock:
    """Step 3 of the protocol for one process: each epoch's order, the clock around it, and
    what is recorded after it. The protocol's own loop (`run_process`) calls it; so does a
    framework's own loop (a workload's `fit`, e.g. Keras' model.fit), from its per-epoch hooks:

        order = clock.begin(epoch)      before the epoch's first batch: its index batches
        clock.start()                   every process waits for the others; the clock starts
        ... the epoch's batches and steps ...
        clock.stop(steps, loss_sum, pending)   the device sync; the clock stops; evaluation
                                        and the record, outside the clock
    """

    def __init__(self, spec, placement, backend, workload, results):
        self.spec, self.placement, self.backend, self.workload = spec, placement, backend, workload
        self.results = results  # None in the processes that do not report
        # The whole run's CPU: the trainer leads the process group of every rank and worker.
        self.meter = CpuMeter.of_group() if results else None
        self.epochs_done = 0
        self.epoch = self.order = self.info = self.started = self.cpu_before = None

    def begin(self, epoch):
        """The epoch's index batches for this process (the same order in every framework);
        `info` holds the workload's epoch_info (e.g. the learning rate), which the framework
        applies before the epoch's first step."""
        if epoch != self.epochs_done + 1:
            raise RuntimeError(f"{self.spec.framework} began epoch {epoch} after epoch {self.epochs_done}")
        self.epoch = epoch
        self.order = self.placement.local(epoch_order(self.workload.n_train, self.spec.global_batch, self.spec.seed,
                                                      epoch))
        self.info = self.workload.epoch_info(epoch)
        return self.order

    def start(self):
        self.cpu_before = self.meter.read() if self.meter else None
        self.backend.barrier(self.placement)
        self.started = time.perf_counter()

    def stop(self, steps, loss_sum, pending=None):
        """steps: the train steps the epoch ran; loss_sum: the sum of their losses on the device
        (None: no loss); pending: the last device value of the epoch, for frameworks that can
        only wait on a value (JAX), else None (the loss sum is used)."""
        self.backend.sync(self.placement, loss_sum if pending is None else pending)
        wall_s = time.perf_counter() - self.started
        machine = self.meter.usage(self.cpu_before, self.meter.read()) if self.meter else None
        if steps != len(self.order):
            raise RuntimeError(f"{self.spec.framework} ran {steps} steps of an epoch of {len(self.order)} batches")
        loss = None
        if loss_sum is not None:
            loss = self.backend.mean_over_processes(self.backend.to_float(loss_sum), self.placement) / steps
        if self.results:
            eval_start = time.perf_counter()
            metric = self.workload.evaluate()
            self.results.epoch(epoch=self.epoch, wall_s=wall_s, samples=steps * self.spec.global_batch, steps=steps,
                               loss=loss, metric=metric, eval_s=time.perf_counter() - eval_start, machine=machine,
                               **self.info)
        self.backend.barrier(self.placement)  # the others wait for the evaluation, outside the clock
        self.epochs_done = self.epoch


def run_epochs(workload, clock, epochs):
    """The protocol's own loop: the workload's batches, one train_step each."""
    for epoch in range(1, epochs + 1):
        order = clock.begin(epoch)
        batches = workload.batches(epoch, order)  # outside the clock
        clock.start()
        loss_sum, steps = None, 0
        for batch in batches:
            loss = workload.train_step(batch)
            if loss is not None:
                loss_sum = loss if loss_sum is None else loss_sum + loss
            steps += 1
        clock.stop(steps, loss_sum)


def run_process(rank, spec_dict, result_path, device_kind):
    """One process of a run: the protocol above. Rank 0 writes the results."""
    spec = spec_from_dict(spec_dict)
    numerics.apply(spec.numerics)  # again: data-parallel ranks started by spawn are new interpreters
    backend = backend_of(spec)
    placement = backend.setup(spec, device_kind, rank)
    results = Results(result_path) if placement.rank == 0 else None
    workload = workload_class(spec)(spec, placement, backend)
    workload.build()
    if results:
        results.update(framework_version=backend.version(), parameters=workload.parameter_count(),
                       numerics=numerics.measure(spec.numerics, backend), **backend.describe(placement))
    clock = EpochClock(spec, placement, backend, workload, results)
    if hasattr(workload, "fit"):
        workload.fit(clock)  # the framework's own loop (Keras' model.fit), clocked from its hooks
    else:
        run_epochs(workload, clock, spec.epochs)
    if clock.epochs_done != spec.epochs:
        raise RuntimeError(f"{spec.framework} clocked {clock.epochs_done} of {spec.epochs} epochs")
    if results:
        start = time.perf_counter()
        final = workload.final_evaluation()
        results.update(final=final, final_eval_s=time.perf_counter() - start if final else None)
        results.update(status="ok", gpu_allocator_peak=backend.gpu_allocator_peak(placement))
    backend.teardown(placement)


def _end_with_harness(spec_path):
    """When the harness ends (even by kill -9), this process gets SIGTERM: it removes the
    run's temporary folder (the harness's, named .dlbench-*, nothing else) and kills its
    process group (data-parallel ranks, loader workers). Forked children inherit the
    handler but keep the default behaviour."""
    owner = os.getpid()
    workdir = Path(spec_path).resolve().parent

    def handler(signum, frame):
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if workdir.name.startswith(TEMPORARY_PREFIX):
            shutil.rmtree(workdir, ignore_errors=True)
        kill_group(os.getpgid(0))

    signal.signal(signal.SIGTERM, handler)
    if not die_with_parent(signal.SIGTERM):
        handler(signal.SIGTERM, None)


def main():
    """The training process: python -m dlbench.protocol SPEC_FILE RESULT_FILE."""
    spec_path, result_path = sys.argv[1:3]
    _end_with_harness(spec_path)
    with open(spec_path) as f:
        spec_dict = json.load(f)
    spec = spec_from_dict(spec_dict)
    numerics.apply(spec.numerics)  # before the backend imports its framework, which starts threads
    backend = backend_of(spec)
    if hasattr(backend, "configure"):
        backend.configure(spec)
    try:
        device_kind = resolve_device(spec.framework, spec.device, backend.visible_gpus(), len(gpus()), spec.devices)
        backend.check(spec, device_kind)
        workload_class(spec).check(spec, device_kind)
        backend.launch(spec, run_process, (spec_to_dict(spec), result_path, device_kind))
    except NotApplicable as reason:
        write_json(result_path, {"status": "not_applicable", "reason": str(reason), "epochs": []})
        print(f"not applicable: {reason}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    # Frameworks may leave non-daemon threads behind (TF's gRPC workers); the results are written.
    os._exit(0)


if __name__ == "__main__":
    # Run main() of the imported module, not of this __main__ copy, so that the exceptions
    # the frameworks raise (dlbench.protocol.NotApplicable) are the ones main() catches.
    from dlbench.protocol import main as protocol_main

    protocol_main()
