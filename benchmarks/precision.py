"""What a 16-bit precision buys, and whether it ran: a framework's harness runs at each precision,
interleaved, on one point (dlbench.precision).

    python benchmarks/precision.py --workload chestxray --framework pytorch \
        [--precisions float32 mixed-bfloat16 mixed-float16] [--rounds 2] [--device-kind gpu] \
        [--python INTERPRETER] [--configfile config.yaml X.yaml] [--out precision.csv]

Each round runs the harness (python -m dlbench.harness, the workflow's own run) once per precision,
the order turned round every round, at the point benchmarks/overhead.py times (the workload's
overhead_row; DenseNet on synthetic input for chestxray). Prints per run its steady samples/s and
the record's measured precision (the share of its forward pass's FLOPs in 16 bits, followed or
not), and at the end each 16-bit precision's throughput over float32's (the median of the rounds'
ratios: one sample a round, no interval). A point a framework or the device cannot run is printed
as not applicable, with the reason. With --out, appends a CSV row per run. For a lent GPU machine
benchmarks/gpu_check.sh runs it for PyTorch, JAX and Keras on JAX and on torch.
"""
import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from overhead import BARE, REPO, child_env, plan

from dlbench.precision import POLICIES
from dlbench.specs import spec_to_json

CSV_COLUMNS = ("workload", "framework", "device_kind", "precision", "round", "status", "samples_per_s",
               "measured", "share_16bit", "loss_scaling", "followed", "reason")


def run_harness(python, spec, workdir, framework):
    """The harness's record of one run (Keras: its backend chosen as its env file chooses it)."""
    out = Path(workdir) / "record.json"
    env = child_env()
    if framework.startswith("keras-"):
        env["KERAS_BACKEND"] = framework.removeprefix("keras-")
    proc = subprocess.run([python, "-m", "dlbench.harness", "--spec", spec_to_json(spec), "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True)
    if not out.exists():
        raise SystemExit(f"the harness wrote no record (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", required=True, choices=BARE)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--precisions", nargs="+", choices=POLICIES, default=["float32", "mixed-bfloat16"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device-kind", choices=("auto", "cpu", "gpu"), help="the spec's device kind (default: the config's)")
    parser.add_argument("--python", help="the interpreter (default: the framework's venv)")
    parser.add_argument("--configfile", nargs="+", default=[REPO / "config.yaml"])
    parser.add_argument("--out", type=Path, help="append a CSV row per run here")
    args = parser.parse_args(argv)
    args.input = None
    base, python = plan(args)
    rates = {policy: [] for policy in args.precisions}
    if args.out and not args.out.exists():
        args.out.write_text(",".join(CSV_COLUMNS) + "\n")
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(1, args.rounds + 1):
            order = args.precisions if round_ % 2 else args.precisions[::-1]
            for policy in order:
                spec = dataclasses.replace(base, precision=policy,
                                           run_id=base.run_id.replace("precision~float32", f"precision~{policy}"))
                record = run_harness(python, spec, workdir, args.framework)
                measured = record.get("precision") or {}
                rate = record["summary"]["samples_per_s"] if record["status"] == "ok" else None
                reason = "" if record["status"] == "ok" else (record.get("error") or "").strip().splitlines()[-1:]
                reason = reason if isinstance(reason, str) else (reason[0] if reason else "")
                if rate is not None and measured.get("followed"):
                    rates[policy].append(rate)
                device = (record.get("devices_used") or {}).get("kind") or ""
                print(f"{args.workload} {args.framework} ({device}) {policy} round {round_}: {record['status']}"
                      + (f", {rate:.2f}/s, measured {measured.get('measured')} ({measured.get('share_16bit', 0):.0%} of "
                         f"the forward FLOPs in 16 bits, loss scaling {measured.get('loss_scaling')}, followed "
                         f"{measured.get('followed')})" if rate is not None else f": {reason}"), flush=True)
                if args.out:
                    row = (args.workload, args.framework, device, policy, round_, record["status"],
                           "" if rate is None else f"{rate:.4f}", measured.get("measured", ""),
                           measured.get("share_16bit", ""), measured.get("loss_scaling", ""),
                           measured.get("followed", ""), json.dumps(reason))
                    with open(args.out, "a") as f:
                        f.write(",".join(map(str, row)) + "\n")
    float32 = rates.get("float32") or []
    for policy, values in rates.items():
        if policy == "float32" or not values or not float32:
            continue
        ratios = [a / b for a, b in zip(values, float32)]
        print(f"{args.workload} {args.framework}: {policy} / float32 {statistics.median(ratios):.3f} "
              f"(median of {len(ratios)} rounds: {', '.join(f'{r:.3f}' for r in ratios)}; no interval)")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
