"""Run one benchmark point and write its record, whatever happens to the training.

Runs in the framework's environment. The training runs in a child process
(scripts/<framework>/<workload>.py), so a crash, a hang past the timeout or a kill by
the kernel still ends in a record with status 'failed' and the error; the epochs that
finished before are kept.
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

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
from benchlib.record import environment, summarise, write_json  # noqa: E402

RECORD_VERSION = 1
STDERR_TAIL_LINES = 40


def _forward(stream, tail):
    for line in stream:  # to the rule's log, keeping the end for the record
        sys.stderr.write(line)
        tail.append(line.rstrip("\n"))


def train_in_child(spec, workdir):
    """Run the framework script; return (its result or None, exit code, last stderr lines)."""
    spec_path, result_path = Path(workdir) / "spec.json", Path(workdir) / "result.json"
    spec_path.write_text(json.dumps(spec))
    script = SCRIPTS / spec["framework"] / f"{spec['workload']}.py"
    cmd = [sys.executable, str(script), "--spec", str(spec_path), "--result", str(result_path)]
    tail = collections.deque(maxlen=STDERR_TAIL_LINES)
    # A session of its own, so that a timeout kills the workers the script started too.
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace",
                            start_new_session=True)
    reader = threading.Thread(target=_forward, args=(proc.stderr, tail), daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=spec["timeout_s"])
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        code = None
    reader.join(timeout=10)
    if code is None:
        tail.append(f"killed: still running after the timeout of {spec['timeout_s']} s")
    result = json.loads(result_path.read_text()) if result_path.exists() else None
    return result, code, list(tail)


def make_record(spec, result, code, stderr_tail, started, wall_s):
    result = result or {"epochs": []}
    status = result.get("status")
    if code != 0 or status not in ("ok", "not_applicable"):
        reason = "timed out" if code is None else f"exit code {code}"
        error = f"training process failed ({reason})\n" + "\n".join(stderr_tail)
        status = "failed"
    else:
        error = result.get("reason")
    env = environment()
    env["framework_version"] = result.get("framework_version")
    return {
        "record_version": RECORD_VERSION,
        "workload": spec["workload"],
        "framework": spec["framework"],
        "run_id": spec["run_id"],
        "status": status,
        "error": error,
        "spec": spec,
        "environment": env,
        "device": result.get("device"),
        "threads": result.get("threads"),
        "epochs": result["epochs"],
        "summary": summarise(result["epochs"]),
        "memory": result.get("memory", {"peak_rss_bytes": None, "peak_gpu_bytes": None}),
        "extra": {k: v for k, v in result.items() if k not in KNOWN_RESULT_KEYS},
        "started_at": started,
        "wall_s": wall_s,
    }


KNOWN_RESULT_KEYS = {"status", "reason", "epochs", "framework_version", "device", "threads", "memory"}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="the run's spec as JSON text")
    parser.add_argument("--out", required=True, help="the record to write")
    args = parser.parse_args()
    spec = json.loads(args.spec)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dlbench-") as workdir:
        result, code, tail = train_in_child(spec, workdir)
    record = make_record(spec, result, code, tail, started, time.perf_counter() - t0)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, record)
    print(f"{spec['run_id']}: {record['status']}", file=sys.stderr)


if __name__ == "__main__":
    main()
