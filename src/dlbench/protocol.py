"""The benchmark protocol, written once for every framework: what is timed, and how.

This file is the one to read. A run is one training process, or one group of data-parallel
processes, for one point of a workload's sweep (`dlbench.specs`). Every process runs
`run_process`, which does, for every framework alike:

1. Placement: the framework's adapter (`dlbench.frameworks.<name>`) sets this process's
   threads (the run's threads shared by its processes), its devices and its process group,
   and, before the framework starts, the numerics policies: denormals (`numerics.apply`),
   cuDNN's autotuning (`numerics.CUDNN_AUTOTUNE`, set by `adapter.cudnn_autotune`) and float32
   on GPUs (`numerics.gpu_float32`: full float32 or TF32, set by `adapter.gpu_float32`).
   Compiled programs go to the point's persistent cache (`compile_cache_folder`,
   `adapter.compile_cache`): repeat 1 empties it and compiles cold, later repeats load from it;
   the record counts its files before and after (a warm repeat adds none).
   The device is resolved the same way for every framework (`resolve_device`): `auto` uses
   GPUs when the machine has them; a framework that cannot see the machine's GPUs stops
   before training, with a message naming it, rather than being compared on the CPU. A 16-bit
   precision on a CPU without that type's arithmetic is not applicable, in every framework alike
   (`precision.hardware_reason`).
2. Build, outside the clock: the workload module (`dlbench.workloads.<workload>.<framework>`)
   builds its model, optimizer, datasets, loaders and loader worker pools (`build`), in the
   run's precision (`spec.precision`, each framework's idiom). Then the proof of it: one forward
   pass on a fixed batch, its compute operations as the framework ran them, the share of their
   FLOPs in 16 bits (`dlbench.precision.measure`, the record's `precision`).
3. The run's order: epochs of `epoch_order` back to back (each epoch's sample order comes
   from the seed and the epoch number alone, the same in every framework), as many steps as
   the run can take; each process takes its contiguous slice of every global batch
   (`Placement.local`). `batches(order, epochs)` makes ONE iterable of device batches over
   it, outside any clock; the iteration runs across every block of the run: no new iterator,
   no evaluation, nothing else inside or between the timed units.
4. Blocks of consecutive steps (`RunClock`, `Plan`), each timed the same way:
   - every process waits for the others (`adapter.barrier`), the clock starts
     (`dlbench.clock.now`); the block's steps run, loading included; one `train_step(batch)`
     per batch returns the loss on the device, summed there: no host synchronisation per
     step; `adapter.sync` waits for the device (and every process); the clock stops; the
     loss is read after that. Around the clock, outside it, the first process reads what
     the machine did (`dlbench.machine_load`: CPU stolen, other processes' CPU, the run's CPU and
     minor page faults).
   - First the convergence segments (`convergence.steps`, evaluated every
     `convergence.eval_every` steps on the first process, timed apart: `eval_s`), from the
     shared start: loss and metric by step, the first segment's time (compilation).
   - Then the throughput units. A run with no convergence segment first runs its first step
     alone, a calibration block of 1 step (the compiling step: warm-up in the record, its time
     used for nothing else): a unit is never calibrated on the compiling step. Then calibration
     units, their length doubled (or scaled by the last unit's time) from
     `measure.min_unit_steps` until a unit lasts `min_unit_seconds` (as pyperf calibrates its
     loops; at most `max_unit_steps`); warm-up units of that length until two consecutive
     ones agree within `warmup_tolerance` ("stable") or `max_warmup_units` have run ("cap");
     then `steady_units` steady units: the measurement. Nothing but the clock's sync runs
     between them.
   - The convergence segments run in the first `measurement.convergence_repeats` repeats
     (`dlbench.sweep.run_fields`); later repeats measure throughput only, from the same start.
   The learning rate of a step's epoch (`epoch_info`) is applied by `set_learning_rate` at
   the step where it changes. `RunClock` is this step, written once: the protocol's own loop
   (`run_blocks`) drives it, and so does a framework that owns its loop (Keras' model.fit,
   one fit epoch per block), from its per-epoch hooks.
5. At the end, the workload's final evaluation (e.g. test AUC), timed apart on the same clock.

What a process spends before its first block is timed too (the record's `startup`): the
interpreter and the project's imports, the framework's import and start, the placement, the
build, the numerics probes, and the last preparations before the first block.

The harness (`dlbench.harness`) runs all this in a child process with a timeout, samples
memory and utilisation of the whole process tree (loader workers included, the same way for
every framework), and writes the record whatever happens.

The contract of an adapter and a workload, in code, checked as a framework's module loads:
dlbench.contract; the clock: dlbench.clock.
"""
import importlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from dlbench import nodes, numerics, precision
from dlbench.clock import RunClock, run_blocks, timed
from dlbench.contract import OwnLoop, verify_adapter
from dlbench.definitions import run_set, runs_as, workload_module
from dlbench.errors import FrameworkError, NotApplicable
from dlbench.frameworks import PRIVATE_API_OVERRIDES, adapter_module, not_applicable_before_start
from dlbench.machine import gpus
from dlbench.processes import STARTED, TEMPORARY_PREFIX, die_with_parent, end_process, kill_group
from dlbench.record import write_json
from dlbench.result_file import ResultFile
from dlbench.specs import spec_from_dict, spec_to_dict

# time.time() of the start-up's steps, in the environment: data-parallel ranks are new processes
MAIN = "DLBENCH_MAIN"
_FINISHED = []  # the workloads whose runs are done (see run_process)


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
            f"this environment cannot use them (device_kind: {requested}); set device_kind: cpu to compare on CPUs")
    if visible_gpus < devices:
        raise NotApplicable(f"{devices} GPUs asked for, this machine has {visible_gpus}")
    return "gpu"


def workload_class(spec):
    module = importlib.import_module(workload_module(spec.run_set, spec.framework))
    return module.WORKLOAD


def adapter_of(spec):
    """The spec's adapter module, checked against the contract (dlbench.contract.Adapter: a
    framework's checks itself as it loads; the adapter of no framework, here), its optional methods
    the contract's defaults where it leaves them out."""
    return verify_adapter(importlib.import_module(adapter_module(spec.framework)))


def compile_cache_folder(spec, result_path):
    """The folder of the run's compiled programs: the point's (spec.compile_cache.directory), or
    an empty one in the harness's temporary folder, removed with it."""
    directory = spec.compile_cache.directory
    return Path(directory) if directory else Path(result_path).parent / "compile-cache"


def cache_files(folder):
    return sum(1 for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else 0


def startup_seconds(entered, set_up, built, prepared, first_block):
    """What the first process spent before its first block, step by step (time.time() stamps;
    the harness's and main's in the environment)."""
    started, main_ = (float(os.environ[name]) for name in (STARTED, MAIN))
    return {"interpreter_s": main_ - started,  # Python and the project's imports (numpy, the config's code)
            "framework_s": entered - main_,  # the framework's import and start, the device, the launch of the processes
            "setup_s": set_up - entered,  # threads, devices, the process group (adapter.setup)
            "build_s": built - set_up,  # model, initial weights, optimizer, data and loaders (workload.build)
            "numerics_s": prepared - built,  # the numerics and precision probes (dlbench.numerics, dlbench.precision)
            "first_batches_s": first_block - prepared}  # the run's order, the batches' iterable, a fit's set-up


def run_process(rank, spec_dict, result_path, device_kind):
    """One process of a run: the protocol above. Rank 0 writes the results."""
    entered = time.time()
    spec = spec_from_dict(spec_dict)
    numerics.apply(spec.numerics)  # again: data-parallel ranks started by spawn are new interpreters
    adapter = adapter_of(spec)
    cudnn_autotune = numerics.cudnn_autotune(adapter)  # again, as the denormals policy
    gpu_float32_settings = adapter.gpu_float32(spec.gpu_float32)
    cache = compile_cache_folder(spec, result_path)
    cache_settings = adapter.compile_cache(cache)  # again: spawned ranks
    cache_files_before = cache_files(cache)
    placement = adapter.setup(spec, device_kind, rank)
    set_up = time.time()
    results = ResultFile(result_path) if placement.rank == 0 else None
    workload = workload_class(spec)(spec, placement, adapter)
    workload.scratch = Path(result_path).resolve().parent  # the harness's folder, removed however the run ends
    workload.build()
    built = time.time()
    if results:
        results.update(framework_version=adapter.version(), library_version=workload.library_version,
                       parameters=workload.parameter_count(),
                       train_samples=workload.n_train, initial_weights=workload.initial_weights,
                       numerics=numerics.measure(spec, adapter, placement, gpu_float32_settings), cudnn_autotune=cudnn_autotune,
                       compile_cache={"directory": spec.compile_cache.directory, "fill": spec.compile_cache.fill,
                                      "settings": cache_settings, "files_before": cache_files_before},
                       **({"precision": precision.measure(spec, workload)} if spec.precision else {}),
                       **adapter.describe(placement),
                       # the same list, written with every later update: what ran under the override
                       private_api_overrides=PRIVATE_API_OVERRIDES)
    prepared = time.time()
    clock = RunClock(spec, placement, adapter, workload, results)
    if isinstance(workload, OwnLoop):
        workload.fit(clock)  # the framework's own loop (Keras' model.fit), clocked from its hooks
    else:
        run_blocks(workload, clock)
    if clock.upcoming() is not None:
        raise RuntimeError(f"{spec.framework} stopped before the run's {clock.upcoming().kind} blocks were done")
    if results:
        results.update(plan=clock.plan.summary(),
                       startup=startup_seconds(entered, set_up, built, prepared, clock.first_started))
        final, final_eval_s = timed(workload.final_evaluation)
        results.update(final=final, final_eval_s=final_eval_s if final else None)
        results.update(status="ok", gpu_allocator_peak=adapter.gpu_allocator_peak(placement),
                       compile_cache={**results.data["compile_cache"], "files_after": cache_files(cache)})
    adapter.teardown(placement)
    if results and PRIVATE_API_OVERRIDES:  # an internals module first imported by the teardown
        results.update(private_api_overrides=PRIVATE_API_OVERRIDES)
    # Held until the process ends: freed here, a multiprocessing Pool of the workload's would be
    # finalized (terminate, then join its workers), and that join hung once on a worker its
    # SIGTERM had missed (a chestxray-preprocess smoke run). The results are written; the process
    # ends with os._exit and the harness kills its process group, workers included.
    _FINISHED.append(workload)


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
    os.environ[MAIN] = repr(time.time())
    os.environ.setdefault(STARTED, os.environ[MAIN])  # started by hand, not by the harness
    spec_path, result_path = sys.argv[1:3]
    _end_with_harness(spec_path)
    with open(spec_path) as f:
        spec_dict = json.load(f)
    spec = spec_from_dict(spec_dict)
    try:
        # what these pins, or this run set's model, cannot run costs no framework start-up
        not_applicable_before_start(spec, run_set(runs_as(spec.run_set)).modes_not_applicable)
    except NotApplicable as reason:
        _end(result_path, nodes.this_node(spec), reason)
    numerics.apply(spec.numerics)  # before the adapter imports its framework, which starts threads
    adapter = adapter_of(spec)
    adapter.configure(spec)  # optional: by default nothing (dlbench.contract.Adapter)
    adapter.cudnn_autotune(numerics.CUDNN_AUTOTUNE)  # before visible_gpus() starts the framework (XLA reads its flags then)
    adapter.gpu_float32(spec.gpu_float32)  # likewise: NVIDIA's libraries read their variables when they load
    node = nodes.this_node(spec)  # before anything starts: a multi-node run without its place stops here
    cache = compile_cache_folder(spec, result_path)
    if spec.compile_cache.fill and node.rank == 0:  # cold: nothing another run compiled
        shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    adapter.compile_cache(cache)  # before anything compiles (Inductor and TensorFlow's XLA read variables)
    try:
        device_kind = resolve_device(spec.framework, spec.device_kind, adapter.visible_gpus(), len(gpus()), spec.devices)
        if spec.precision and (reason := precision.hardware_reason(spec.precision, device_kind)):
            raise NotApplicable(reason)
        adapter.check(spec, device_kind)
        workload_class(spec).check(spec, device_kind)
        adapter.launch(spec, run_process, (spec_to_dict(spec), result_path, device_kind))
    except NotApplicable as reason:
        _end(result_path, node, reason)
    _end(result_path, node)


def _end(result_path, node, not_applicable=None):
    """The process's end: where the run is not applicable, rank 0 writes why."""
    if not_applicable is not None:
        if node.rank == 0:
            write_json(result_path, {"status": "not_applicable", "reason": str(not_applicable)})
        print(f"not applicable: {not_applicable}", file=sys.stderr)
    nodes.write_node_file(result_path, node)
    end_process()


if __name__ == "__main__":
    # Run main() of the imported module, not of this __main__ copy, so that the run_process
    # that data-parallel launchers pickle by name is dlbench.protocol.run_process.
    from dlbench.protocol import main as protocol_main

    protocol_main()
