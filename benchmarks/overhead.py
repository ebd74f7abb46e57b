"""The harness's overhead: the harness and the framework's bare loop, alternately, on one point.

    python benchmarks/overhead.py --workload mnist --framework pytorch [--rounds 3] [--epochs 4]
        [--configfile config.yaml ...] [--out overhead.csv]

Both run the same model, batch, threads and data in the same environment, one device, with
no other training job running: the harness as the workflow runs it (python -m
dlbench.harness: a child process, the shared protocol, its calibrated and warmed-up steady
units, no convergence segments), the bare loop as a tutorial would write it
(src/dlbench/workloads/<workload>/scripts/bare_<framework>.py SPEC_FILE EPOCHS; the point is
the workload's definition's overhead_row). Each round runs both, in
alternating order (ABBA), so that drift of the machine falls on both. Steady throughput is the
harness's median over its steady units, and the bare loop's samples/s over its epochs after
the first. Prints, per round,
harness / bare, then their median and range over the rounds; 1.0 means no overhead.
Run it after the workflow has prepared the data of the config (snakemake --cores all).
"""
import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dlbench.config import load_config
from dlbench.envs import env_hash
from dlbench.specs import Convergence, spec_to_json
from dlbench.workloads import WORKLOADS, definition, run_set

REPO = Path(__file__).resolve().parents[1]
# The workloads with bare loops: their definitions say the point compared (overhead_row).
BARE = [w for w in WORKLOADS if hasattr(definition(w), "overhead_row")]


def bare_throughput(epochs):
    steady = epochs[1:]
    return sum(e["samples"] for e in steady) / sum(e["wall_s"] for e in steady)


def run_harness(python, spec_json, workdir):
    out = Path(workdir) / "record.json"
    subprocess.run([python, "-m", "dlbench.harness", "--spec", spec_json, "--out", str(out)], check=True, cwd=REPO,
                   capture_output=True)
    record = json.loads(out.read_text())
    if record["status"] != "ok":
        raise SystemExit(f"the harness run failed: {record['error']}")
    return record["summary"]["samples_per_s"]


def run_bare(python, spec_json, workload, framework, epochs, workdir):
    spec_file = Path(workdir) / "spec.json"
    spec_file.write_text(spec_json)
    script = REPO / "src" / "dlbench" / "workloads" / workload / "scripts" / f"bare_{framework}.py"
    proc = subprocess.run([python, str(script), str(spec_file), str(epochs)],
                          check=True, cwd=REPO, capture_output=True, text=True)
    return bare_throughput([json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", required=True, choices=BARE)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4, help="epochs of the bare loop; the first is warm-up")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--configfile", nargs="+", default=[REPO / "config.yaml"])
    parser.add_argument("--out", type=Path, help="append a CSV row per round here")
    args = parser.parse_args()
    config = load_config(*args.configfile)
    row = {**definition(args.workload).overhead_row(config), "framework": args.framework, "repeat": 1}
    spec = run_set(args.workload).build(config, row, args.threads)
    spec_json = spec_to_json(dataclasses.replace(spec, convergence=Convergence(0, 1)))
    venvs = Path(config["venv_prefix"] or "~/.cache/dlbench/venvs").expanduser()
    python = str(venvs / f"{args.framework}-{env_hash(REPO / 'envs' / f'{args.framework}.yaml')}" / "python")
    ratios = []
    with tempfile.TemporaryDirectory() as workdir:
        for round_ in range(1, args.rounds + 1):
            order = ("harness", "bare") if round_ % 2 else ("bare", "harness")
            rates = {}
            for kind in order:
                rates[kind] = (run_harness(python, spec_json, workdir) if kind == "harness"
                               else run_bare(python, spec_json, args.workload, args.framework, args.epochs, workdir))
            ratios.append(rates["harness"] / rates["bare"])
            print(f"{args.workload} {args.framework} round {round_}: harness {rates['harness']:.1f}/s, "
                  f"bare {rates['bare']:.1f}/s, ratio {ratios[-1]:.3f}", flush=True)
            if args.out:
                new = not args.out.exists()
                with open(args.out, "a") as f:
                    if new:
                        f.write("workload,framework,round,harness_per_s,bare_per_s,ratio\n")
                    f.write(f"{args.workload},{args.framework},{round_},{rates['harness']:.3f},"
                            f"{rates['bare']:.3f},{ratios[-1]:.4f}\n")
    print(f"{args.workload} {args.framework}: harness / bare {statistics.median(ratios):.3f} "
          f"(median of {len(ratios)} rounds, range {min(ratios):.3f} to {max(ratios):.3f})")


if __name__ == "__main__":
    sys.exit(main())
