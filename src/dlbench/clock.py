"""The clock of a run, the same for every framework: the run's order of index batches
(epoch_order, run_order), the plan of its blocks (Plan), the clock around each block (RunClock),
the protocol's own loop over them (run_blocks) and what the first process reports (Results).
Step 3 and 4 of dlbench.protocol.

Every time a record holds as a measurement (blocks, evaluations, the bare loops' epochs) is read
from `now`, here; the start-up's steps are time.time() stamps (dlbench.protocol.startup_seconds)."""
import hashlib
import math
import time
from dataclasses import dataclass

from dlbench.machine_load import CpuMeter
from dlbench.record import contended_unit


# A calibration variant's planted slowdown (docs/ab.md): the fraction of its throughput it gives up,
# a known difference the A/B must call slower. Set as the variant's environment variable.
PLANTED_SLOWDOWN = "DLBENCH_PLANTED_SLOWDOWN"


def planted_slowdown(environment):
    """The planted slowdown in a spec's environment (NAME=value items), 0.0 without one; a value
    outside [0, 0.5) is refused, naming the variable."""
    values = dict(item.split("=", 1) for item in environment)
    text = values.get(PLANTED_SLOWDOWN, "0")
    try:
        fraction = float(text)
    except ValueError:
        fraction = -1.0
    if not 0 <= fraction < 0.5:
        raise ValueError(f"{PLANTED_SLOWDOWN}={text}: a fraction of the throughput, from 0 to below 0.5")
    return fraction


def now():
    """Seconds on the one clock of every measurement: time.perf_counter, monotonic and the finest
    the platform has."""
    return time.perf_counter()


def timed(work):
    """work() outside every block (an evaluation), on the clock: (what it returns, its seconds)."""
    start = now()
    result = work()
    return result, now() - start


def epoch_order(n_samples, global_batch, seed, epoch):
    """Index batches of one epoch, the same in every framework: (n_batches, global_batch).

    The order comes from the seed and the epoch number alone; the last partial batch is
    dropped so that every framework and every device count sees the same samples.
    """
    import numpy as np  # here, not above: the harness imports this module for `now`, and numpy costs it 0.2 CPU-s

    order = np.random.default_rng([seed, epoch]).permutation(n_samples)
    n_batches = n_samples // global_batch
    if n_batches == 0:
        raise ValueError(f"{n_samples} samples make no batch of {global_batch}")
    return order[: n_batches * global_batch].reshape(n_batches, global_batch)


def run_order(n_samples, global_batch, seed, steps):
    """The run's index batches, epochs 1, 2, ... back to back, `steps` of them:
    (order (steps, global_batch), the epoch of each step (steps,))."""
    import numpy as np  # as in epoch_order
    orders, epochs, total, epoch = [], [], 0, 0
    while total < steps:
        epoch += 1
        orders.append(epoch_order(n_samples, global_batch, seed, epoch))
        epochs.append(np.full(len(orders[-1]), epoch))
        total += len(orders[-1])
    return np.concatenate(orders)[:steps], np.concatenate(epochs)[:steps]


# Calibration aims this far above min_unit_seconds: units calibrated just above it dipped under it
# once warm-up had sped the steps up (15 of a default run's 172 timed runs, in 11 of its 46 points, had
# a steady unit below the minimum, each calibrated at 1.01-1.19x of it), and a short unit withdraws
# the verdicts it enters
CALIBRATION_MARGIN = 1.25


@dataclass(frozen=True)
class Block:
    kind: str    # segment (convergence, evaluated after), calibration, warmup or steady
    steps: int


class Plan:
    """Which block of steps comes next: the measurement plan, pure (no clock, no framework).

    Convergence segments of `convergence.eval_every` steps up to `convergence.steps`. A run with
    no segment (convergence.steps 0) then runs its first step alone, a calibration block of 1
    step: the compiling step, warm-up in the record, whose time decides nothing (a unit is never
    calibrated on it); a run with segments took its first steps in them. Then calibration units
    from `measure.min_unit_steps` steps, each next one longer (twice as long, or as long as the
    last one's time says a `min_unit_seconds` unit is, if more; at most `max_unit_steps`) until
    one lasts CALIBRATION_MARGIN x `min_unit_seconds`; that length is the unit. That unit is the
    first warm-up unit.

    The warm-up rule: warm-up units of that length follow until two consecutive ones agree, the
    later's seconds per step within `warmup_tolerance` of the earlier's ("stable"), or
    `max_warmup_units` have run ("cap"). Agreement is between neighbours only: a run whose steps
    keep slowing (or speeding up) by more than the tolerance from one unit to the next never
    agrees and ends at the cap, which the record says (warmup_end). A warm-up unit shorter than
    `min_unit_seconds` (the steps sped up after calibration: seen at 2x in onnxruntime) ends no
    warm-up and makes the units after it longer, as calibration would at its speed (at most
    `max_unit_steps`), so that the steady units last the minimum. Then `steady_units` steady
    units, and the plan is done (None). A steady unit during which other processes took more than
    `max_other_cpus` cores timed them as well as the framework: it is recorded as `contended` and
    timed again in its place, up to `max_contended_reruns` times a run; past that it counts, and
    the tables flag it."""

    def __init__(self, measure, convergence):
        self.measure = measure
        whole, rest = divmod(convergence.steps, convergence.eval_every)
        self.segment_steps = [convergence.eval_every] * whole + ([rest] if rest else [])
        self.segments_done = self.steady_done = 0
        # the compiling step, alone, where no segment takes it
        self.first_step_alone = convergence.steps == 0
        self.unit_steps = measure.min_unit_steps
        self.calibrated = False
        self.warmup_walls = []   # the warm-up units' times ...
        self.warmup_steps = []   # ... and their steps
        self.warmup_end = None   # stable or cap
        self.contended_reruns = 0

    @staticmethod
    def max_steps(measure, convergence):
        """An upper bound of the steps a run takes (the length of its order)."""
        first_step = 1 if convergence.steps == 0 else 0  # the compiling step's own block
        calibration = 2 * measure.max_unit_steps  # the doubling's sum
        units = measure.max_warmup_units + measure.steady_units + measure.max_contended_reruns
        return convergence.steps + first_step + calibration + units * measure.max_unit_steps

    def upcoming(self):
        if self.segments_done < len(self.segment_steps):
            return Block("segment", self.segment_steps[self.segments_done])
        if self.first_step_alone:
            return Block("calibration", 1)
        if not self.calibrated:
            return Block("calibration", self.unit_steps)
        if self.warmup_end is None:
            return Block("warmup", self.unit_steps)
        if self.steady_done < self.measure.steady_units:
            return Block("steady", self.unit_steps)
        return None

    def recorded_kind(self, contended):
        """The kind the upcoming block is recorded as: `contended` for a steady unit that is timed
        again (contended: other processes took more than max_other_cpus cores during it)."""
        kind = self.upcoming().kind
        if kind == "steady" and contended and self.contended_reruns < self.measure.max_contended_reruns:
            return "contended"
        return kind

    def done(self, wall_s, contended=False):
        """The upcoming block ran in wall_s seconds (contended: see recorded_kind)."""
        m = self.measure
        kind = self.recorded_kind(contended)
        if kind == "contended":
            self.contended_reruns += 1
        elif kind == "segment":
            self.segments_done += 1
        elif self.first_step_alone:
            self.first_step_alone = False  # its time holds compiling: it sets no length
        elif kind == "calibration":
            if wall_s >= CALIBRATION_MARGIN * m.min_unit_seconds or self.unit_steps >= m.max_unit_steps:
                self.calibrated = True
                self._warmup(wall_s)
            else:
                wanted = math.ceil(self.unit_steps * CALIBRATION_MARGIN * m.min_unit_seconds / max(wall_s, 1e-9))
                self.unit_steps = min(m.max_unit_steps, max(2 * self.unit_steps, wanted))
        elif kind == "warmup":
            self._warmup(wall_s)
        else:
            self.steady_done += 1

    def _warmup(self, wall_s):
        m = self.measure
        self.warmup_walls.append(wall_s)
        self.warmup_steps.append(self.unit_steps)
        per_step = [wall / steps for wall, steps in zip(self.warmup_walls, self.warmup_steps)]
        short = wall_s < m.min_unit_seconds and self.unit_steps < m.max_unit_steps
        if short:
            wanted = math.ceil(self.unit_steps * CALIBRATION_MARGIN * m.min_unit_seconds / max(wall_s, 1e-9))
            self.unit_steps = min(m.max_unit_steps, wanted)
        if not short and len(per_step) >= 2 and abs(per_step[-1] - per_step[-2]) <= m.warmup_tolerance * per_step[-2]:
            self.warmup_end = "stable"
        elif len(per_step) >= m.max_warmup_units:
            self.warmup_end = "cap"

    def summary(self):
        return {"unit_steps": self.unit_steps, "warmup_units": len(self.warmup_walls), "warmup_end": self.warmup_end,
                "contended_reruns": self.contended_reruns}


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

    Blocks have any length from 1 step: a run with no convergence segment starts with its first
    step alone (Plan), so a framework's own loop must run a 1-step block as any other.
    """

    def __init__(self, spec, placement, adapter, workload, results):
        self.spec, self.placement, self.adapter, self.workload = spec, placement, adapter, workload
        self.results = results  # None in the processes that do not report
        # The whole run's CPU: the trainer leads the process group of every rank and worker.
        self.meter = CpuMeter.of_group() if results else None
        self.plan = Plan(spec.measure, spec.convergence)
        order, self.epochs = run_order(workload.n_train, spec.global_batch, spec.seed,
                                       Plan.max_steps(spec.measure, spec.convergence))
        self.order = placement.local(order)
        if results:  # the run's sample order, every process's slices: the same for every framework and placement
            results.update(order_sha256=hashlib.sha256(order.astype("int64", order="C")).hexdigest())
        self.steps_done = 0
        self.planted = planted_slowdown(spec.environment)
        self.started = self.cpu_before = None
        self.first_started = None  # time.time() when the first block started (the start-up's end)

    def upcoming(self):
        return self.plan.upcoming()

    def learning_rate(self, step):
        """The learning rate of the run's step `step` (from the task's epoch_info), or None."""
        return self.workload.epoch_info(int(self.epochs[step])).get("lr")

    def start(self):
        if self.first_started is None:
            self.first_started = time.time()
        self.cpu_before = self.meter.read() if self.meter else None
        self.adapter.barrier(self.placement)
        self.started = now()

    def stop(self, steps, loss_sum, pending=None):
        """steps: the train steps the block ran; loss_sum: the sum of their losses on the device
        (None: no loss); pending: the last device value of the block, for frameworks that can
        only wait on a value (JAX), else None (the loss sum is used)."""
        self.adapter.sync(self.placement, loss_sum if pending is None else pending)
        wall_s = now() - self.started
        if self.planted:  # busy, as slower steps would be: the block takes 1 / (1 - planted) as long
            end = self.started + wall_s / (1 - self.planted)
            while now() < end:
                pass
            wall_s = now() - self.started
        # The next block is planned from the mean of the processes' times, the same number in
        # each: a process that planned from its own could run other blocks than the others and
        # wait for them in a collective forever (seen: JAX across nodes, in calibration).
        planned_s = self.adapter.mean_over_processes(wall_s, self.placement)
        machine = self.meter.usage(self.cpu_before, self.meter.read()) if self.meter else None
        block = self.plan.upcoming()
        if steps != block.steps:
            raise RuntimeError(f"{self.spec.framework} ran {steps} steps of a {block.kind} block of {block.steps}")
        contended = False
        if block.kind == "steady":
            # only the reporting process meters the machine: the others count 0, and any flag is > 0
            # in the mean, so that every process plans the same next block
            here = machine is not None and contended_unit(machine, wall_s, self.spec.measure.max_other_cpus)
            contended = self.adapter.mean_over_processes(float(here), self.placement) > 0
        kind = self.plan.recorded_kind(contended)
        loss = None
        if loss_sum is not None:
            loss = self.adapter.mean_over_processes(self.adapter.to_float(loss_sum), self.placement) / steps
        self.steps_done += steps
        last = self.steps_done - 1
        if self.results:
            values = dict(index=len(self.results.data["segments" if kind == "segment" else "units"]) + 1,
                          steps=steps, step_end=self.steps_done, epoch=int(self.epochs[last]), wall_s=wall_s,
                          samples=steps * self.spec.global_batch, loss=loss, machine=machine,
                          lr=self.learning_rate(last))
            if block.kind == "segment":
                values["metric"], values["eval_s"] = timed(self.workload.evaluate)
            self.results.block(kind, **values)
        if block.kind == "segment":
            self.adapter.barrier(self.placement)  # the others wait for the evaluation, outside the clock
        self.plan.done(planned_s, contended)


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
