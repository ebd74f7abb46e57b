"""Run one benchmark point and write its record, whatever happens to the training.

Runs in the framework's environment: python -m dlbench.harness --spec JSON --out RECORD.
The training (dlbench.protocol) runs in a child process with a timeout, so a crash, a hang
past the timeout or a kill by the kernel still ends in a record with status 'failed' and
the error; the epochs that finished before are kept. Memory and utilisation are sampled
here, over the child's whole process tree (loader workers included), the same way for
every framework.
"""
import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from dlbench.monitor import UtilisationSampler
from dlbench.record import make_record, write_json
from dlbench.specs import spec_from_dict

STDERR_TAIL_LINES = 40
SAMPLE_INTERVAL_S = 0.5


def _forward(stream, tail):
    for line in stream:  # to the rule's log, keeping the end for the record
        sys.stderr.write(line)
        tail.append(line.rstrip("\n"))


def train_in_child(spec, workdir):
    """Run the training process; return (its results or None, exit code, last stderr lines,
    utilisation samples)."""
    spec_path, result_path = Path(workdir) / "spec.json", Path(workdir) / "result.json"
    spec_path.write_text(json.dumps(spec))
    cmd = [sys.executable, "-m", "dlbench.protocol", str(spec_path), str(result_path)]
    tail = collections.deque(maxlen=STDERR_TAIL_LINES)
    # A session of its own, so that a timeout kills the workers the training started too.
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace", start_new_session=True)
    reader = threading.Thread(target=_forward, args=(proc.stderr, tail), daemon=True)
    reader.start()
    sampler = UtilisationSampler(proc.pid, SAMPLE_INTERVAL_S)
    sampler.start()
    try:
        code = proc.wait(timeout=spec["timeout_s"])
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    utilisation = sampler.stop()
    reader.join(timeout=10)
    if code is None:
        tail.append(f"killed: still running after the timeout of {spec['timeout_s']} s")
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return result, code, list(tail), utilisation


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="the run's spec as JSON text")
    parser.add_argument("--out", required=True, help="the record to write")
    args = parser.parse_args()
    spec = json.loads(args.spec)
    point = spec_from_dict(spec).point()  # a bad spec fails here, naming the key, before anything runs
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dlbench-") as workdir:
        result, code, tail, utilisation = train_in_child(spec, workdir)
    record = make_record(spec, point, result, code, tail, started, time.perf_counter() - t0, utilisation)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, record)
    print(f"{spec['run_id']}: {record['status']}", file=sys.stderr)


if __name__ == "__main__":
    main()
