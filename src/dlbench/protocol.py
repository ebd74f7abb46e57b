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
3. The run's order: epochs of `epoch_order` back to back (each epoch's sample order comes
   from the seed and the epoch number alone, the same in every framework), as many steps as
   the run can take; each process takes its contiguous slice of every global batch
   (`Placement.local`). `batches(order, epochs)` makes ONE iterable of device batches over
   it, outside any clock; the iteration runs across every block of the run: no new iterator,
   no evaluation, nothing else inside or between the timed units.
4. Blocks of consecutive steps (`RunClock`, `Plan`), each timed the same way:
   - every process waits for the others (`backend.barrier`), the clock starts
     (`time.perf_counter`); the block's steps run, loading included; one `train_step(batch)`
     per batch returns the loss on the device, summed there: no host synchronisation per
     step; `backend.sync` waits for the device (and every process); the clock stops; the
     loss is read after that. Around the clock, outside it, the first process reads what
     the machine did (`dlbench.machine`: CPU stolen, other processes' CPU, the run's CPU and
     minor page faults).
   - First the convergence segments (`convergence.steps`, evaluated every
     `convergence.eval_every` steps on the first process, timed apart: `eval_s`), from the
     shared start: loss and metric by step, the first segment's time (compilation).
   - Then the throughput units: calibration units, their length doubled (or scaled by the
     last unit's time) from `measure.min_unit_steps` until a unit lasts `min_unit_seconds`
     (as pyperf calibrates its loops; at most `max_unit_steps`); warm-up units of that length
     until two consecutive ones agree within `warmup_tolerance` ("stable") or
     `max_warmup_units` have run ("cap"); then `steady_units` steady units: the
     measurement. Nothing but the clock's sync runs between them.
   The learning rate of a step's epoch (`epoch_info`) is applied by `set_learning_rate` at
   the step where it changes. `RunClock` is this step, written once: the protocol's own loop
   (`run_blocks`) drives it, and so does a framework that owns its loop (Keras' model.fit,
   one fit epoch per block), from its per-epoch hooks.
5. At the end, the workload's final evaluation (e.g. test AUC), timed apart.

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
                                         pending: the block's last device value (the loss sum)
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
import math
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dlbench import numerics
from dlbench.files import file_sha256
from dlbench.frameworks import backend_module, workload_module
from dlbench.machine import CpuMeter
from dlbench.processes import die_with_parent, kill_group
from dlbench.record import gpus, write_json
from dlbench.specs import spec_from_dict, spec_to_dict
from dlbench.weights import initial_weights, weights_sha256


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


def run_order(n_samples, global_batch, seed, steps):
    """The run's index batches, epochs 1, 2, ... back to back, `steps` of them:
    (order (steps, global_batch), the epoch of each step (steps,))."""
    orders, epochs, total, epoch = [], [], 0, 0
    while total < steps:
        epoch += 1
        orders.append(epoch_order(n_samples, global_batch, seed, epoch))
        epochs.append(np.full(len(orders[-1]), epoch))
        total += len(orders[-1])
    return np.concatenate(orders)[:steps], np.concatenate(epochs)[:steps]


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
        batches(order, epochs)     ONE iterable of this process's device batches of `order`
                                   (the run's index batches, every epoch back to back) and
                                   `epochs` (each step's epoch: augmentation draws from it);
                                   made once, iterated across every block of the run
        train_step(batch)          one step; returns the loss on the device (None: no loss)
        set_learning_rate(lr)      (where the task's epoch_info gives one) from the next step on
        predict(inputs)            numpy inputs -> numpy outputs, in inference mode
        parameter_count()          trainable parameters of self.model
        load_weights(weights)      {name: numpy array} in PyTorch's names and layouts, the
                                   conversion this framework needs (the parity test)
    and may implement the classmethod check(spec, device_kind), which raises NotApplicable
    for a point without meaning in this framework.

    A framework whose idiom is its own training loop (Keras' model.fit) implements instead of
    batches and train_step:
        fit(clock)                 train every block of clock.upcoming(), one fit epoch per
                                   block, calling the RunClock's start and stop from the
                                   loop's per-epoch hooks

    The task's part implements:
        load_data()                the arrays or file lists; sets self.n_train
        evaluate() -> {metric: value}          after every convergence segment (first process)
        and may implement epoch_info(epoch) (e.g. the learning rate of the epoch) and
        final_evaluation() (at the end).
    """

    def __init__(self, spec, placement, backend):
        self.spec, self.placement, self.backend = spec, placement, backend

    @classmethod
    def check(cls, spec, device_kind):
        """Raise NotApplicable where this framework gives the point no meaning."""

    def build(self):
        """The data, the model, the same start in every framework, the training pieces.

        The start: the shared initial weights (dlbench.weights: drawn once from the seed, the
        workload and the model, in PyTorch's names and layouts), loaded through the framework's
        own load_weights before build_training makes optimizers, replicas or training state
        from the model; unless the spec names ImageNet weights (ChestX-ray's spec.weights, a
        file per framework), which build_model has loaded. `initial_weights` says which, for
        the record."""
        self.load_data()
        self.build_model()
        self.initial_weights = None  # a workload without a model (the loader benchmark)
        if getattr(self.spec, "weights", None):
            self.initial_weights = {"source": "imagenet", "sha256": file_sha256(self.spec.weights)}
        else:
            weights = initial_weights(self.spec)
            if weights is not None:
                self.load_weights(weights)
                self.initial_weights = {"source": "shared", "sha256": weights_sha256(weights)}
        self.build_training()

    def epoch_info(self, epoch):
        return {}

    def final_evaluation(self):
        return {}


class Results:
    """What the first process reports, flushed after every block so that a crash keeps the
    blocks that finished."""

    def __init__(self, path):
        self.path = path
        self.data = {"status": "running", "segments": [], "units": []}

    def update(self, **values):
        self.data.update(values)
        write_json(self.path, self.data)

    def block(self, kind, **values):
        """A convergence segment or a throughput unit."""
        self.data["segments" if kind == "segment" else "units"].append({"kind": kind, **values})
        write_json(self.path, self.data)
        print(f"{kind} {values['index']}: {values['steps']} steps, {values['wall_s']:.3f} s, loss {values['loss']}"
              + (f", {values['metric']}" if kind == "segment" else ""), flush=True)


def workload_class(spec):
    module = importlib.import_module(workload_module(spec.workload, spec.framework))
    return module.WORKLOAD


def backend_of(spec):
    return importlib.import_module(backend_module(spec.framework))


@dataclass(frozen=True)
class Block:
    kind: str    # segment (convergence, evaluated after), calibration, warmup or steady
    steps: int


class Plan:
    """Which block of steps comes next: the measurement plan, pure (no clock, no framework).

    Convergence segments of `convergence.eval_every` steps up to `convergence.steps`; then
    calibration units from `measure.min_unit_steps` steps, each next one longer (twice as
    long, or as long as the last one's time says a `min_unit_seconds` unit is, if more; at
    most `max_unit_steps`) until one lasts `min_unit_seconds`; that length is the unit. That
    unit is the first warm-up unit; warm-up units follow until two consecutive ones agree
    within `warmup_tolerance` of the earlier ("stable"), or `max_warmup_units` have run
    ("cap"). Then `steady_units` steady units, and the plan is done (None)."""

    def __init__(self, measure, convergence):
        self.measure = measure
        whole, rest = divmod(convergence.steps, convergence.eval_every)
        self.segment_steps = [convergence.eval_every] * whole + ([rest] if rest else [])
        self.segments_done = self.steady_done = 0
        self.unit_steps = measure.min_unit_steps
        self.calibrated = False
        self.warmup_walls = []   # the warm-up units at the calibrated length
        self.warmup_end = None   # stable or cap

    @staticmethod
    def max_steps(measure, convergence):
        """An upper bound of the steps a run takes (the length of its order)."""
        calibration = 2 * measure.max_unit_steps  # the doubling's sum
        return convergence.steps + calibration + (measure.max_warmup_units + measure.steady_units) * measure.max_unit_steps

    def upcoming(self):
        if self.segments_done < len(self.segment_steps):
            return Block("segment", self.segment_steps[self.segments_done])
        if not self.calibrated:
            return Block("calibration", self.unit_steps)
        if self.warmup_end is None:
            return Block("warmup", self.unit_steps)
        if self.steady_done < self.measure.steady_units:
            return Block("steady", self.unit_steps)
        return None

    def done(self, wall_s):
        """The upcoming block ran in wall_s seconds."""
        m = self.measure
        kind = self.upcoming().kind
        if kind == "segment":
            self.segments_done += 1
        elif kind == "calibration":
            if wall_s >= m.min_unit_seconds or self.unit_steps >= m.max_unit_steps:
                self.calibrated = True
                self._warmup(wall_s)
            else:
                wanted = math.ceil(self.unit_steps * m.min_unit_seconds / max(wall_s, 1e-9))
                self.unit_steps = min(m.max_unit_steps, max(2 * self.unit_steps, wanted))
        elif kind == "warmup":
            self._warmup(wall_s)
        else:
            self.steady_done += 1

    def _warmup(self, wall_s):
        self.warmup_walls.append(wall_s)
        walls = self.warmup_walls
        if len(walls) >= 2 and abs(walls[-1] - walls[-2]) <= self.measure.warmup_tolerance * walls[-2]:
            self.warmup_end = "stable"
        elif len(walls) >= self.measure.max_warmup_units:
            self.warmup_end = "cap"

    def summary(self):
        return {"unit_steps": self.unit_steps, "warmup_units": len(self.warmup_walls), "warmup_end": self.warmup_end}


class RunClock:
    """Step 4 of the protocol for one process: the run's order, the plan of its blocks, the
    clock around each block and what is recorded after it. The protocol's own loop
    (`run_blocks`) calls it; so does a framework's own loop (a workload's `fit`, e.g. Keras'
    model.fit), from its per-epoch hooks:

        clock.order, clock.epochs       the run's index batches for this process, each step's epoch
        block = clock.upcoming()        the next block (kind, steps), None when the run is done
        clock.start()                   every process waits for the others; the clock starts
        ... block.steps steps ...
        clock.stop(steps, loss_sum, pending)   the device sync; the clock stops; evaluation
                                        (after a convergence segment) and the record, outside it
    """

    def __init__(self, spec, placement, backend, workload, results):
        self.spec, self.placement, self.backend, self.workload = spec, placement, backend, workload
        self.results = results  # None in the processes that do not report
        # The whole run's CPU: the trainer leads the process group of every rank and worker.
        self.meter = CpuMeter.of_group() if results else None
        self.plan = Plan(spec.measure, spec.convergence)
        order, self.epochs = run_order(workload.n_train, spec.global_batch, spec.seed,
                                       Plan.max_steps(spec.measure, spec.convergence))
        self.order = placement.local(order)
        self.steps_done = 0
        self.started = self.cpu_before = None

    def upcoming(self):
        return self.plan.upcoming()

    def learning_rate(self, step):
        """The learning rate of the run's step `step` (from the task's epoch_info), or None."""
        return self.workload.epoch_info(int(self.epochs[step])).get("lr")

    def start(self):
        self.cpu_before = self.meter.read() if self.meter else None
        self.backend.barrier(self.placement)
        self.started = time.perf_counter()

    def stop(self, steps, loss_sum, pending=None):
        """steps: the train steps the block ran; loss_sum: the sum of their losses on the device
        (None: no loss); pending: the last device value of the block, for frameworks that can
        only wait on a value (JAX), else None (the loss sum is used)."""
        self.backend.sync(self.placement, loss_sum if pending is None else pending)
        wall_s = time.perf_counter() - self.started
        machine = self.meter.usage(self.cpu_before, self.meter.read()) if self.meter else None
        block = self.plan.upcoming()
        if steps != block.steps:
            raise RuntimeError(f"{self.spec.framework} ran {steps} steps of a {block.kind} block of {block.steps}")
        loss = None
        if loss_sum is not None:
            loss = self.backend.mean_over_processes(self.backend.to_float(loss_sum), self.placement) / steps
        self.steps_done += steps
        last = self.steps_done - 1
        if self.results:
            values = dict(index=len(self.results.data["segments" if block.kind == "segment" else "units"]) + 1,
                          steps=steps, step_end=self.steps_done, epoch=int(self.epochs[last]), wall_s=wall_s,
                          samples=steps * self.spec.global_batch, loss=loss, machine=machine,
                          lr=self.learning_rate(last))
            if block.kind == "segment":
                eval_start = time.perf_counter()
                values["metric"] = self.workload.evaluate()
                values["eval_s"] = time.perf_counter() - eval_start
            self.results.block(block.kind, **values)
        if block.kind == "segment":
            self.backend.barrier(self.placement)  # the others wait for the evaluation, outside the clock
        self.plan.done(wall_s)


def run_blocks(workload, clock):
    """The protocol's own loop: one iterable of the workload's batches for the whole run, one
    train_step each, in the clock's blocks."""
    batches = iter(workload.batches(clock.order, clock.epochs))  # outside the clock
    lr = None
    while (block := clock.upcoming()) is not None:
        clock.start()
        loss_sum = None
        for step in range(clock.steps_done, clock.steps_done + block.steps):
            if (step_lr := clock.learning_rate(step)) != lr:
                workload.set_learning_rate(step_lr)
                lr = step_lr
            loss = workload.train_step(next(batches))
            if loss is not None:
                loss_sum = loss if loss_sum is None else loss_sum + loss
        clock.stop(block.steps, loss_sum)


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
                       train_samples=workload.n_train, initial_weights=workload.initial_weights,
                       numerics=numerics.measure(spec.numerics, backend), **backend.describe(placement))
    clock = RunClock(spec, placement, backend, workload, results)
    if hasattr(workload, "fit"):
        workload.fit(clock)  # the framework's own loop (Keras' model.fit), clocked from its hooks
    else:
        run_blocks(workload, clock)
    if clock.upcoming() is not None:
        raise RuntimeError(f"{spec.framework} stopped before the run's {clock.upcoming().kind} blocks were done")
    if results:
        results.update(plan=clock.plan.summary())
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
        write_json(result_path, {"status": "not_applicable", "reason": str(reason)})
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
