"""The measurement plan and the run's order (dlbench.clock), without a framework; the protocol's
modules import each other one way; every phase a record times is read from the clock; what these
pins cannot run is recorded as such before its framework starts; PyTorch's spawned ranks end as
the protocol's process does."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlbench.clock import Block, Plan, epoch_order, run_order
from dlbench.spec_types import Convergence, Measure
from dlbench.specs import spec_to_json
from conftest import venv_python
from specs import smoke_spec


def measure(**changes):
    fields = dict(min_unit_seconds=1.0, min_unit_steps=4, max_unit_steps=64, warmup_tolerance=0.1,
                  max_warmup_units=4, steady_units=3, max_other_cpus=0.5, max_contended_reruns=2)
    return Measure(**{**fields, **changes})


def play(plan, seconds_per_step, noise=()):
    """Run the plan with a fixed time per step (times 1 + noise[i] for block i); the blocks run."""
    blocks, noise = [], list(noise)
    while (block := plan.upcoming()) is not None:
        factor = 1 + (noise.pop(0) if noise else 0)
        blocks.append(block)
        plan.done(block.steps * seconds_per_step * factor)
    return blocks


def play_steps(plan, seconds, step=0.01):
    """Run the plan with each block's steps taking seconds(i, block) for the run's step i (from
    0) in the plan's block number `block` (from 0), else `step`; the blocks run."""
    blocks, done = [], 0
    while (block := plan.upcoming()) is not None:
        plan.done(sum(seconds(i, len(blocks)) for i in range(done, done + block.steps)))
        blocks.append(block)
        done += block.steps
    return blocks


def test_calibration_grows_units_until_one_lasts_the_minimum_then_warms_up_and_measures():
    plan = Plan(measure(), Convergence(steps=0, eval_every=1))
    blocks = play(plan, seconds_per_step=0.05)  # a 1 s unit is 20 steps
    kinds = [b.kind for b in blocks]
    calibration = [b.steps for b in blocks if b.kind == "calibration"]
    # the first step alone (no segment took it), then from min_unit_steps
    assert calibration[:2] == [1, 4] and calibration[-1] >= 20 and calibration == sorted(calibration)
    assert kinds == ["calibration"] * len(calibration) + ["warmup"] + ["steady"] * 3
    assert {b.steps for b in blocks if b.kind != "calibration"} == {calibration[-1]}
    # the last calibration unit is the first warm-up unit of that length; the next agrees: stable
    assert plan.summary() == {"unit_steps": calibration[-1], "warmup_units": 2, "warmup_end": "stable",
                              "contended_reruns": 0}


def test_warm_up_runs_until_two_units_agree_or_the_cap():
    # after the first step alone, the first units of the calibrated length are 50% and 30% slow, then steady
    plan = Plan(measure(min_unit_steps=32), Convergence(0, 1))
    blocks = play(plan, 0.05, noise=[0.0, 0.5, 0.3, 0.0, 0.0])
    assert plan.summary()["warmup_end"] == "stable" and plan.summary()["warmup_units"] == 4
    assert [b.kind for b in blocks] == ["calibration"] * 2 + ["warmup"] * 3 + ["steady"] * 3
    # never agreeing: the cap ends it, and the record says so
    plan = Plan(measure(min_unit_steps=32, max_warmup_units=3), Convergence(0, 1))
    play(plan, 0.05, noise=[0.0, 0.5, 0.0, 0.5, 0.0, 0.5])
    assert plan.summary() == {"unit_steps": 32, "warmup_units": 3, "warmup_end": "cap", "contended_reruns": 0}


def test_units_stop_growing_at_the_maximum():
    plan = Plan(measure(max_unit_steps=16), Convergence(0, 1))
    blocks = play(plan, seconds_per_step=0.001)
    assert max(b.steps for b in blocks) == 16 and plan.summary()["unit_steps"] == 16
    assert sum(b.steps for b in blocks) <= Plan.max_steps(plan.measure, Convergence(0, 1))


def test_convergence_segments_come_first_each_evaluated_then_the_units():
    plan = Plan(measure(min_unit_steps=32), Convergence(steps=25, eval_every=10))
    blocks = play(plan, 0.05)
    assert [(b.kind, b.steps) for b in blocks[:3]] == [("segment", 10), ("segment", 10), ("segment", 5)]
    # the segments took the first steps: calibration starts from min_unit_steps
    assert (blocks[3].kind, blocks[3].steps) == ("calibration", 32)
    assert sum(b.steps for b in blocks) <= Plan.max_steps(plan.measure, Convergence(25, 10))


def test_the_compiling_step_never_sets_the_unit_s_length():
    """No segment: the first step (30 s of compiling) runs alone, a calibration block that counts
    as warm-up; the unit is calibrated on the steps after it (0.01 s each): at least
    min_unit_steps and min_unit_seconds, not the 5 steps that 30 s would have passed as a unit."""
    plan = Plan(measure(min_unit_seconds=1.0, min_unit_steps=5, max_unit_steps=1000), Convergence(0, 1))
    blocks = play_steps(plan, lambda i, block: 30.0 if i == 0 else 0.01)
    assert blocks[0] == Block("calibration", 1) and blocks[1] == Block("calibration", 5)
    unit = plan.summary()["unit_steps"]
    assert unit >= 5 and unit * 0.01 >= 1.0 - 1e-9
    assert {b.steps for b in blocks if b.kind in ("warmup", "steady")} == {unit}
    assert plan.summary()["warmup_end"] == "stable" and max(plan.warmup_walls) < 2.0  # the 30 s is no warm-up unit
    assert sum(b.steps for b in blocks) <= Plan.max_steps(plan.measure, Convergence(0, 1))


def test_warm_up_ends_at_the_cap_while_the_steps_keep_slowing_and_stable_once_they_settle():
    """The warm-up rule (Plan): two consecutive warm-up units agree within warmup_tolerance, or the cap."""
    tolerance = measure().warmup_tolerance  # 10%
    # every block's steps 15% slower than the last one's: neighbours never agree, whatever the cap
    for cap in (4, 8):
        plan = Plan(measure(max_warmup_units=cap), Convergence(0, 1))
        play_steps(plan, lambda i, block: 0.01 * 1.15 ** block)
        assert 0.15 > tolerance and plan.summary()["warmup_end"] == "cap"
        assert plan.summary()["warmup_units"] == cap
    # slow at first, then settling (the excess halves every block): stable before the cap
    plan = Plan(measure(max_warmup_units=8), Convergence(0, 1))
    play_steps(plan, lambda i, block: 0.01 * (1 + 0.5 * 0.5 ** block))
    assert plan.summary()["warmup_end"] == "stable" and plan.summary()["warmup_units"] < 8


@pytest.mark.parametrize("n_samples, batch", [(100, 8), (64, 64)])
def test_the_run_order_is_the_epochs_back_to_back_whatever_its_length(n_samples, batch):
    order, epochs = run_order(n_samples, batch, seed=3, steps=50)
    per_epoch = n_samples // batch
    assert order.shape == (50, batch) and epochs.shape == (50,)
    assert np.array_equal(order[:per_epoch], epoch_order(n_samples, batch, 3, 1))
    assert np.array_equal(order[per_epoch:2 * per_epoch], epoch_order(n_samples, batch, 3, 2)[:50 - per_epoch])
    assert epochs[0] == 1 and epochs[per_epoch] == 2 and np.all(np.diff(epochs) >= 0)
    # the same order for the same seed, wherever it is cut
    assert np.array_equal(run_order(n_samples, batch, 3, 20)[0], order[:20])


def test_a_framework_s_code_never_imports_the_protocol():
    """The protocol imports the framework modules (by name, at run time); they import the
    contract and the clock, which import neither the protocol nor a framework or workload
    module (the lists of both, at most): no cycle."""
    from dlbench.definitions import workload_module
    from dlbench.frameworks import FRAMEWORKS, adapter_module
    from dlbench.provenance import code_files

    src = Path(__file__).resolve().parents[1] / "src"
    framework_modules = [m for name in FRAMEWORKS for w in ("mnist", "imdb", "chestxray")
                         for m in (adapter_module(name), workload_module(w, name))]
    read = set()
    for module in [*framework_modules, "dlbench.contract", "dlbench.clock"]:
        files = {str(p).split("src/", 1)[1] for p in code_files(src, modules=[module])}
        own = module.replace(".", "/")
        assert {f"{own}.py", f"{own}/__init__.py"} & files, f"{module}: its own file was not read"
        assert "dlbench/protocol.py" not in files, module
        read |= files if module in framework_modules else set()
    # the imports were followed: the framework code reached the contract and the clock
    assert {"dlbench/contract.py", "dlbench/clock.py"} <= read
    for module in ["dlbench.contract", "dlbench.clock"]:
        files = {str(p).split("src/", 1)[1] for p in code_files(src, modules=[module])}
        registries = {"dlbench/frameworks/__init__.py", "dlbench/workloads/__init__.py", "dlbench/studies/__init__.py"}
        assert not any(f.startswith(("dlbench/frameworks/", "dlbench/workloads/", "dlbench/studies/"))
                       for f in files - registries), module


class FakeBackend:
    """A framework adapter of one process of several, for the clock: nothing to wait for or sync;
    the collective mean_over_processes is `mean(rank, value)`, what the test says the others give."""

    def __init__(self, rank, mean):
        self.rank, self.mean = rank, mean

    def barrier(self, placement):
        pass

    def sync(self, placement, pending):
        pass

    def to_float(self, value):
        return value

    def mean_over_processes(self, value, placement):
        return self.mean(self.rank, value)


def test_every_process_plans_its_blocks_from_the_same_time():
    """Two processes of one run, one a little slower by its own clock near the calibration's
    threshold: both plan from the mean of their times (mean_over_processes), so they run the
    same blocks (apart, they would not: one would wait in a collective for the other)."""
    from types import SimpleNamespace

    from dlbench.clock import RunClock
    from dlbench.contract import Placement

    spec = SimpleNamespace(measure=measure(min_unit_seconds=1.0, min_unit_steps=4), global_batch=2, seed=0,
                           convergence=Convergence(steps=0, eval_every=1), framework="fake", environment=())
    own_seconds_per_step = {0: 0.26, 1: 0.24}  # 4 steps: 1.04 s and 0.96 s, either side of 1 s
    mean_seconds_per_step = sum(own_seconds_per_step.values()) / 2

    def mean_over_processes(rank, value):  # the processes' mean, as a collective gives it
        return value * mean_seconds_per_step / own_seconds_per_step[rank]

    def blocks_of(rank):
        clock = RunClock(spec, Placement(rank, 2, "cpu", 1, 1), FakeBackend(rank, mean_over_processes),
                         SimpleNamespace(n_train=64), None)
        clock.started = None
        planned = []
        while (block := clock.upcoming()) is not None:
            planned.append((block.kind, block.steps))
            clock.start()
            clock.started -= block.steps * own_seconds_per_step[rank]  # as if the block took this long
            clock.stop(block.steps, None)
        return planned

    assert blocks_of(0) == blocks_of(1)


def test_a_unit_calibrated_before_warm_up_sped_the_steps_up_stays_above_the_minimum():
    """Calibration aims at CALIBRATION_MARGIN x min_unit_seconds: steps 16% faster after it (as
    warm-up makes them) still give steady units of at least min_unit_seconds."""
    plan = Plan(measure(min_unit_seconds=1.0, min_unit_steps=5, max_unit_steps=1000), Convergence(0, 1))
    walls = []

    def seconds(i, block):
        return 0.05 if plan.upcoming().kind == "calibration" else 0.042

    while (block := plan.upcoming()) is not None:
        wall = sum(seconds(i, None) for i in range(block.steps))
        walls.append((block.kind, wall))
        plan.done(wall)
    steady = [wall for kind, wall in walls if kind == "steady"]
    assert len(steady) == plan.measure.steady_units == 3, walls  # the run measured its steady units
    assert all(wall >= 1.0 for wall in steady), walls


def test_a_contended_steady_unit_is_timed_again_in_its_place_up_to_the_cap():
    """Steady units 1 and 2 contended (other processes took more than max_other_cpus): each is
    recorded as contended and timed again; with the cap (2) spent, a third contended one counts."""
    plan = Plan(measure(min_unit_steps=32, max_contended_reruns=2), Convergence(0, 1))
    kinds, steady_seen = [], 0
    while (block := plan.upcoming()) is not None:
        contended = block.kind == "steady" and steady_seen in (0, 1, 3)
        steady_seen += block.kind == "steady"
        kinds.append(plan.recorded_kind(contended))
        plan.done(block.steps * 0.05, contended)
    assert kinds == ["calibration"] * 2 + ["warmup"] + ["contended", "contended"] + ["steady"] * 3
    assert plan.summary()["contended_reruns"] == 2
    steps = sum(32 for _ in kinds[1:]) + 1
    assert steps <= Plan.max_steps(plan.measure, Convergence(0, 1))
    # a unit nobody contended is never timed again, and warm-up is never "contended"
    plan = Plan(measure(min_unit_steps=32), Convergence(0, 1))
    assert [b.kind for b in play(plan, 0.05)].count("steady") == 3 and plan.summary()["contended_reruns"] == 0


def test_every_process_times_a_contended_unit_again_though_only_the_first_meters_the_machine(tmp_path):
    """Only the reporting process reads the machine's CPU (RunClock.meter); the others learn of a
    contended unit from the mean over the processes, so all of them run the same blocks."""
    from types import SimpleNamespace

    from dlbench.clock import RunClock
    from dlbench.contract import Placement
    from dlbench.result_file import ResultFile

    spec = SimpleNamespace(measure=measure(min_unit_seconds=0.0, min_unit_steps=4, max_contended_reruns=2),
                           global_batch=2, seed=0, convergence=Convergence(steps=0, eval_every=1), framework="fake", environment=())

    def mean_over_processes(rank, value):
        # the contention flag (0 or 1) as a collective gives it: process 0 meters 1 at every
        # steady unit (Meter below), process 1 meters nothing and says 0
        return (1.0 + value) / 2 if value in (0.0, 1.0) else value

    class Meter:  # other processes took 1.5 cores during every unit
        def read(self):
            return {}

        def usage(self, before, after):
            return {"other_cpu_s": 1.5 * 0.04}

    def blocks_of(rank):
        results = ResultFile(tmp_path / f"{rank}.json") if rank == 0 else None
        clock = RunClock(spec, Placement(rank, 2, "cpu", 1, 1), FakeBackend(rank, mean_over_processes),
                         SimpleNamespace(n_train=64), results)
        clock.meter = Meter() if rank == 0 else None
        clock.workload = SimpleNamespace(epoch_info=lambda epoch: {})
        planned = []
        while (block := clock.upcoming()) is not None:
            planned.append((block.kind, block.steps))
            clock.start()
            clock.started -= 0.04
            clock.stop(block.steps, None)
        return planned, clock

    first, clock = blocks_of(0)
    second, _ = blocks_of(1)
    assert first == second and clock.plan.summary()["contended_reruns"] == 2
    kinds = [unit["kind"] for unit in clock.results.data["units"]]
    assert kinds[-5:] == ["contended", "contended", "steady", "steady", "steady"]


def test_a_planted_slowdown_makes_every_block_take_its_share_longer_and_a_bad_one_is_refused_naming_it(tmp_path):
    """The A/B's positive control (docs/ab.md): DLBENCH_PLANTED_SLOWDOWN=0.2 in a variant's
    environment gives up a fifth of its throughput: every block, timed on the clock, takes 1/0.8
    of its steps' own time, spent busy. Outside [0, 0.5) it is refused, naming the variable
    (in the config: tests/test_config.py)."""
    from types import SimpleNamespace

    from dlbench.clock import PLANTED_SLOWDOWN, RunClock, now, planted_slowdown
    from dlbench.contract import Placement
    from dlbench.result_file import ResultFile

    def units(environment):
        spec = SimpleNamespace(measure=measure(min_unit_seconds=0.0, min_unit_steps=10), global_batch=2, seed=0,
                               convergence=Convergence(steps=0, eval_every=1), framework="fake", environment=environment)
        clock = RunClock(spec, Placement(0, 1, "cpu", 1, 1), FakeBackend(0, lambda rank, value: value),
                         SimpleNamespace(n_train=64, epoch_info=lambda epoch: {}), ResultFile(tmp_path / "r.json"))
        clock.meter = None
        while (block := clock.upcoming()) is not None:
            clock.start()
            own = clock.started + block.steps * 0.01  # the steps' own time: 10 ms each
            while now() < own:
                pass
            clock.stop(block.steps, None)
        return [unit["wall_s"] / (unit["steps"] * 0.01) for unit in clock.results.data["units"]]

    def median(values):
        return sorted(values)[len(values) // 2]

    # at least by construction; about that in the middle (this machine's other work lengthens some:
    # blocks of 100 ms, so that one preemption of 10 ms is a tenth, not a quarter)
    plain, slowed = units(()), units((f"{PLANTED_SLOWDOWN}=0.2", "OTHER=1"))
    assert min(plain) >= 1.0 and median(plain) < 1.1, plain
    assert min(slowed) >= 1.25 and median(slowed) < 1.35, slowed
    for bad in ("0.5", "-0.1", "ten"):
        with pytest.raises(ValueError, match=f"{PLANTED_SLOWDOWN}={bad}: a fraction"):
            planted_slowdown([f"{PLANTED_SLOWDOWN}={bad}"])


def test_steps_that_speed_up_twice_after_calibration_lengthen_the_unit_before_the_steady_units():
    """Seen in onnxruntime: calibrated on 358 steps in 0.70 s, then 0.36 s for the same units.
    A warm-up unit under min_unit_seconds makes the units after it longer at the new speed, and
    ends no warm-up: every steady unit lasts the minimum, and the steps fit the run's order."""
    plan = Plan(measure(min_unit_seconds=0.5, min_unit_steps=5, max_unit_steps=1000), Convergence(0, 1))
    walls = []
    while (block := plan.upcoming()) is not None:
        fast = block.kind != "calibration" or plan.calibrated
        wall = block.steps * (0.001 if fast else 0.002)
        walls.append((block.kind, block.steps, wall))
        plan.done(wall)
    steady = [(steps, wall) for kind, steps, wall in walls if kind == "steady"]
    assert len(steady) == 3 and all(wall >= 0.5 for _, wall in steady)
    warmup = [(steps, wall) for kind, steps, wall in walls if kind == "warmup"]
    assert warmup[0][1] < 0.5 and warmup[-1][0] > warmup[0][0]  # the short unit, then longer ones
    assert plan.summary()["warmup_end"] == "stable"
    assert sum(steps for _, steps, _ in walls) <= Plan.max_steps(plan.measure, Convergence(0, 1))


# Every framework package an adapter imports: a run that imported one would fail here
FRAMEWORK_PACKAGES = ["torch", "tensorflow", "keras", "jax", "jaxlib", "flax", "optax", "mxnet", "chainer", "cupy"]
BLOCKED_START = ("import sys; sys.modules.update(dict.fromkeys({packages!r})); sys.argv = ['protocol', *sys.argv[1:]]; "
                 "from dlbench.protocol import main; main()")


def start_without_frameworks(spec, tmp_path):
    """The training process of `spec`, in an interpreter where importing any framework fails:
    (the finished process, the result file it was given)."""
    spec_file, result = tmp_path / "spec.json", tmp_path / "result.json"
    spec_file.write_text(spec_to_json(spec))
    proc = subprocess.run([sys.executable, "-c", BLOCKED_START.format(packages=FRAMEWORK_PACKAGES), str(spec_file),
                           str(result)], capture_output=True, text=True, timeout=60)
    return proc, result


# one case of each field the table names (Horovod's runs: the smoke run's, tests/test_workflow.py), and
# the modes a run set's model gives no meaning (RunSet.modes_not_applicable)
@pytest.mark.parametrize("workload, framework, row, reason", [
    ("mnist", "keras-torch", {"devices": 2, "strategy": "data-parallel"}, "not on torch"),
    ("imdb", "jax", {"grad": "sparse"}, "sparse embedding gradients"),
    ("mnist", "pytorch", {"mode": "checkpoint"}, "mnist's model has none"),
    ("imdb", "tensorflow", {"mode": "recompute"}, "imdb's model has none"),
    ("imdb", "pytorch", {"mode": "channels-last"}, "an LSTM's inputs are token sequences"),
])
def test_a_run_its_pins_cannot_do_is_not_applicable_before_its_framework_starts(tmp_path, workload, framework, row,
                                                                                  reason):
    """The run is recorded as not applicable, with why, by a process in which importing any framework fails."""
    proc, result = start_without_frameworks(smoke_spec(workload, framework, **row), tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = json.loads(result.read_text())
    assert written["status"] == "not_applicable" and reason in written["reason"], written


def test_a_run_it_can_do_gets_past_the_check_to_its_framework(tmp_path):
    """The check before the start stops only what the table names: PyTorch's sparse gradients, and its
    memory-saving mode on ChestX-ray's DenseNet, go on to import torch (which this process cannot)."""
    for spec in (smoke_spec("imdb", "pytorch", grad="sparse"), smoke_spec("chestxray", "pytorch", mode="checkpoint")):
        proc, result = start_without_frameworks(spec, tmp_path)
        assert "import of torch halted" in proc.stderr or "No module named 'torch'" in proc.stderr, proc.stderr[-2000:]
        assert not result.exists()


class FakeTime:
    """dlbench.clock.now, advanced only by what the fake workload below spends."""

    def __init__(self):
        self.seconds = 0.0

    def __call__(self):
        return self.seconds


class TimedWorkload:
    """A workload whose steps, evaluations and final evaluation take fixed times on FakeTime."""

    library_version = initial_weights = None
    n_train = 640

    def __init__(self, spec, placement, adapter):
        self.time = None  # set by the test

    def build(self):
        pass

    def parameter_count(self):
        return 0

    def epoch_info(self, epoch):
        return {}

    def batches(self, order, epochs):
        return iter(order)

    def train_step(self, batch):
        self.time.seconds += 0.25
        return 1.0

    def evaluate(self):
        self.time.seconds += 2.0
        return {"accuracy": 0.5}

    def final_evaluation(self):
        self.time.seconds += 7.0
        return {"test_accuracy": 0.5}


def test_every_phase_a_record_times_is_read_from_the_clock(tmp_path, monkeypatch):
    """Blocks, the convergence segments' evaluations and the final evaluation are timed on
    dlbench.clock.now: on a fake clock the record holds the fake clock's seconds, not the
    machine's (a phase timed by its own time.perf_counter would hold almost 0)."""
    import dataclasses

    from dlbench import clock, no_framework, protocol
    from dlbench.specs import spec_to_dict

    time = FakeTime()

    class Workload(TimedWorkload):
        def __init__(self, spec, placement, adapter):
            self.time = time

    spec = dataclasses.replace(smoke_spec("mnist", "pytorch"), numerics="framework-default", precision=None,
                               convergence=Convergence(steps=4, eval_every=2),
                               measure=measure(min_unit_seconds=1.0, min_unit_steps=2, max_contended_reruns=0))
    monkeypatch.setattr(clock, "now", time)
    monkeypatch.setattr(protocol, "adapter_of", lambda spec: no_framework)  # the adapter of no framework: nothing to sync
    monkeypatch.setattr(protocol, "workload_class", lambda spec: Workload)
    monkeypatch.setenv(protocol.STARTED, "0")
    monkeypatch.setenv(protocol.MAIN, "0")
    result = tmp_path / "result.json"
    protocol.run_process(0, spec_to_dict(spec), str(result), "cpu")
    record = json.loads(result.read_text())
    assert record["status"] == "ok"
    assert [(s["steps"], s["wall_s"], s["eval_s"]) for s in record["segments"]] == [(2, 0.5, 2.0), (2, 0.5, 2.0)]
    assert [unit["kind"] for unit in record["units"]].count("steady") == 3, record["units"]  # measure()'s steady_units
    assert all(unit["wall_s"] == unit["steps"] * 0.25 for unit in record["units"])
    assert record["final_eval_s"] == 7.0


RANK_TARGET = '''
import atexit
from pathlib import Path


def target(local_rank, folder):
    atexit.register(lambda: Path(folder, f"finalized-{local_rank}").touch())
    print(f"rank {local_rank} ends", end="")  # not flushed: the process's end flushes it
'''


@pytest.mark.slow
def test_pytorch_s_spawned_ranks_end_without_the_interpreter_s_finalization_their_output_flushed(tmp_path):
    """A DDP rank aborted in finalization in 3 of 128 smoke-sized runs ("terminate called without an
    active exception"): the spawned ranks end as the protocol's process does (dlbench.processes.end_process)."""
    (tmp_path / "rank_target.py").write_text(RANK_TARGET)
    # -c puts the working folder on sys.path, and spawn hands sys.path to the ranks: rank_target imports
    code = ("import json, sys; from dlbench.specs import spec_from_dict; from dlbench.frameworks.pytorch import launch;"
            " from rank_target import target; launch(spec_from_dict(json.loads(sys.argv[1])), target, (sys.argv[2],))")
    spec = spec_to_json(smoke_spec("mnist", "pytorch", devices=2, strategy="ddp"))
    proc = subprocess.run([venv_python("pytorch"), "-c", code, spec, str(tmp_path)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(re.findall(r"rank \d ends", proc.stdout)) == ["rank 0 ends", "rank 1 ends"], proc.stdout
    assert not list(tmp_path.glob("finalized-*"))  # no atexit handler ran: no finalization
