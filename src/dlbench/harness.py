"""Run one benchmark point and write its record, whatever happens to the training.

Runs in the framework's environment: python -m dlbench.harness --spec JSON --out RECORD.
The training (dlbench.protocol) runs in a child process with a timeout (a run of N nodes:
one per node, through dlbench.nodes' launcher: srun, or N processes here), so a crash, a hang
past the timeout or a kill by the kernel still ends in a record with status 'failed' and
the error; the blocks that finished before are kept. Memory and utilisation are sampled
here, over the child's whole process tree (loader workers included), the same way for
every framework.

Nothing outlives the run: the training runs in a process group of its own, which is killed
when the harness exits or is stopped (SIGTERM, SIGINT, SIGHUP); the harness ends when the
process that started it (Snakemake) ends, and the training when the harness does, even by
kill -9. Stopped inside a SLURM job that SLURM ends (scancel, its time limit), its last line
says SLURM's reason (dlbench.scheduler). With --lock PATH, the harness holds an exclusive lock
on PATH-<host>.lock for the whole training, so training runs never overlap on one machine, even
across Snakemake invocations (and runs on other nodes of a cluster do not wait); the record is
written under the lock.
"""
import argparse
import collections
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil

from dlbench import nodes
from dlbench.allocator import process_environment
from dlbench.clock import now
from dlbench.monitor import UtilisationSampler
from dlbench.processes import STARTED, TEMPORARY_PREFIX, die_with_parent, kill_cause, kill_group, oom_kills
from dlbench.record import make_record, write_json
from dlbench.scheduler import slurm_stop, stop_line
from dlbench.specs import spec_from_dict


class Stopped(Exception):
    """The harness was asked to stop: the training is killed and no record is written."""

STDERR_TAIL_LINES = 40
SAMPLE_INTERVAL_S = 0.5
OVER_LIMIT = "over the memory limit"  # in the error of a run killed by its limit
LIMIT_INTERVAL_S = 0.05  # under a memory limit: what a tree can allocate in this time is over it


def _forward(stream, tail):
    for line in stream:  # to the rule's log, keeping the end for the record
        sys.stderr.write(line)
        tail.append(line.rstrip("\n"))


def train_in_child(spec, workdir, memory_limit_mb=None):
    """Run the training process; return (its results, {} if none, with the nodes it ran on; its exit
    code; its last stderr lines; utilisation samples). With memory_limit_mb, a process tree whose
    RSS exceeds it is killed (checked every LIMIT_INTERVAL_S)."""
    spec_path, result_path = Path(workdir) / "spec.json", Path(workdir) / "result.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "dlbench.protocol", str(spec_path), str(result_path)]
    if spec["nodes"] > 1:  # one training process per node (srun, or N on this machine), each finding its place
        cmd = nodes.launcher(spec["nodes"], spec["threads"]) + cmd
    tail = collections.deque(maxlen=STDERR_TAIL_LINES)
    # A session of its own: killing its group ends the workers the training started too. The
    # compilers' caches: the point's or the run's own (dlbench.protocol.compile_cache_folder).
    # its allocator policy and variant's variables (dlbench.allocator), set before it starts
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True,
                            env={**os.environ, **process_environment(spec),
                                 STARTED: repr(time.time())})  # the training's start-up begins
    oom_before = oom_kills()
    reader = threading.Thread(target=_forward, args=(proc.stderr, tail), daemon=True)
    reader.start()
    limit = memory_limit_mb * 2 ** 20 if memory_limit_mb else None
    sampler = UtilisationSampler(proc.pid, LIMIT_INTERVAL_S if limit else SAMPLE_INTERVAL_S, limit,
                                 on_limit=lambda: kill_group(proc.pid))
    sampler.start()
    try:
        code = proc.wait(timeout=spec["timeout_s"])
    except subprocess.TimeoutExpired:
        code = None
    finally:  # also on Stopped: nothing of the training outlives this
        kill_group(proc.pid)
        proc.wait()
    utilisation = sampler.stop()
    reader.join(timeout=10)
    if code is None:
        tail.append(f"killed: still running after the timeout of {spec['timeout_s']} s")
    elif sampler.exceeded_bytes:
        tail.append(f"killed: its processes' PSS reached {sampler.exceeded_bytes / 2 ** 20:.0f} MiB, "
                    f"{OVER_LIMIT} of {memory_limit_mb} MiB")
    elif code < 0:  # a signal from outside: the kernel's OOM killer, or someone's kill
        peak = max(filter(None, utilisation.get("pss_bytes", [])), default=None)
        tail.append(kill_cause(code, oom_before, oom_kills(), peak, psutil.virtual_memory().total))
    result = json.loads(result_path.read_text()) if result_path.exists() else {}
    result["nodes"] = nodes.read_node_files(result_path, spec["nodes"])  # what each node's process was
    return result, code, list(tail), utilisation


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stop(signum, frame):
    # One stop: a second signal would cut short the cleanup this one starts (killing the training,
    # removing the run's folder), leaving the folder behind.
    for other in STOP_SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def exclusive(lock_path):
    """An open file holding an exclusive lock on lock_path (waiting for it if another run holds it)."""
    Path(lock_path).parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path, "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"waiting for {lock_path}: another training run holds it", file=sys.stderr, flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


# Set where no run may start: the quick tests (pytest -m "not slow") set it to say why.
NO_TRAINING = "DLBENCH_NO_TRAINING"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="the run's spec as JSON text")
    parser.add_argument("--out", required=True, help="the record to write")
    parser.add_argument("--lock", help="hold an exclusive lock on PATH-<host>.lock for the whole run")
    parser.add_argument("--attempt", default="first", help="which attempt this is, stored in the record")
    parser.add_argument("--memory-limit-mb", type=int, help="kill the run when its processes' PSS exceeds this")
    args = parser.parse_args()
    if os.environ.get(NO_TRAINING):
        raise SystemExit(f"dlbench.harness: {NO_TRAINING} is set ({os.environ[NO_TRAINING]}): no run starts here")
    for signum in STOP_SIGNALS:
        signal.signal(signum, _stop)
    if not die_with_parent(signal.SIGTERM):
        raise SystemExit("the process that started this run has ended")
    spec = json.loads(args.spec)
    point = spec_from_dict(spec).sweep_point()  # a bad spec fails here, naming the key, before anything runs
    try:
        lock = exclusive(f"{args.lock}-{socket.gethostname()}.lock") if args.lock else None
        started = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        t0 = now()
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=TEMPORARY_PREFIX, dir=Path(args.out).parent) as workdir:
            result, code, tail, utilisation = train_in_child(spec, workdir, args.memory_limit_mb)
        record = make_record(spec, point, result, code, tail, started, now() - t0, utilisation,
                             args.attempt)
        write_json(args.out, record)
    except Stopped as signal_name:
        # Inside a SLURM job whose end SLURM has decided (scancel, its time limit): SLURM's reason,
        # in the log that the end line reads (dlbench.scheduler); no record either way
        why = slurm_stop()
        if why:
            raise SystemExit(stop_line(spec["run_id"], why, signal_name))
        raise SystemExit(f"{spec['run_id']}: stopped by {signal_name}; the training was killed, no record written")
    if lock is not None:
        lock.close()
    print(f"{spec['run_id']}: {record['status']}", file=sys.stderr)


if __name__ == "__main__":
    main()
