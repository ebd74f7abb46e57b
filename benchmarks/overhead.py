"""The harness's overhead: the harness and the framework's bare loop, alternately, on one point.

    python benchmarks/overhead.py --workload chestxray --framework pytorch [--rounds 3] [--epochs 4]
        [--device-kind auto|cpu|gpu] [--input synthetic|resident] [--python PATH]
        [--configfile config.yaml ...] [--out overhead.csv]

Both run the same model, batch, threads, data and device in the same environment, one device,
with no other training job running: the harness as the workflow runs it (python -m
dlbench.harness: a child process, the shared protocol, its calibrated and warmed-up steady
units, no convergence segments), the bare loop as a tutorial would write it
(benchmarks/bare/<workload>_<framework>.py SPEC_FILE EPOCHS; the point is the workload's
definition's overhead_row). Both read one spec: --device-kind sets the kind of its device (default:
the config's), --input its input kind where the point has one (ChestX-ray: synthetic, the
default, host tensors copied to the device each step; resident, tensors put on the device once).
Both run with the framework's venv interpreter, or --python (a machine whose frameworks are
installed in one interpreter, without the workflow's venvs), and PYTHONPATH=src. Each round
runs both, in alternating order (ABBA), so that drift of the machine falls on both. Steady
throughput is the harness's median over its steady units, and the bare loop's samples/s over
its epochs after the first. Prints, per round, harness / bare (and, with --out, appends a CSV
row with the device both ran on and the input), then their median and range over the rounds;
1.0 means no overhead. Run it after the workflow has prepared the data of the config
(snakemake --cores all), or after benchmarks/gpu_check.sh's minimal ChestX-ray data.
"""
import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from dlbench.config import load_config
from dlbench.definitions import definition, run_set
from dlbench.envs import env_hash
from dlbench.spec_types import Convergence
from dlbench.specs import spec_to_json
from dlbench.workloads import WORKLOADS

REPO = Path(__file__).resolve().parents[1]
# The workloads with bare loops: their definitions say the point compared (overhead_row).
BARE = [w for w in WORKLOADS if hasattr(definition(w), "overhead_row")]
INPUTS = ("synthetic", "resident")  # the input kinds the bare loops feed as the harness does
CSV_COLUMNS = ("workload", "framework", "device_kind", "input", "gpu_float32", "round", "harness_per_s", "bare_per_s",
               "ratio")


def child_env():
    """The children import the package from the repository's src, whichever interpreter runs them."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}


def run(command, what):
    """Run a child in the repository; its stdout, or SystemExit with the end of its stderr."""
    proc = subprocess.run(command, cwd=REPO, env=child_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}): {' '.join(command[:3])} ...\n{proc.stderr[-3000:]}")
    return proc.stdout


def run_harness(python, spec_file, workdir):
    """(steady samples/s, the device kind it ran on)."""
    out = Path(workdir) / "record.json"
    run([python, "-m", "dlbench.harness", "--spec", Path(spec_file).read_text(), "--out", str(out)], "the harness")
    record = json.loads(out.read_text())
    if record["status"] != "ok":
        raise SystemExit(f"the harness run failed: {record['error']}")
    return record["summary"]["samples_per_s"], (record["devices_used"] or {}).get("kind")


def bare_loop(workload, framework):
    """The bare loop of a workload and framework. Named after both, not <workload>/<framework>.py: a
    script runs with its folder first on sys.path, where a tensorflow.py would shadow TensorFlow."""
    return REPO / "benchmarks" / "bare" / f"{workload}_{framework}.py"


def run_bare(python, spec_file, workload, framework, epochs):
    """(samples/s over the epochs after the first, the device kind it says it ran on, if it says)."""
    script = bare_loop(workload, framework)
    stdout = run([python, str(script), str(spec_file), str(epochs)], "the bare loop")
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    steady = lines[1:]
    return sum(e["samples"] for e in steady) / sum(e["wall_s"] for e in steady), lines[-1].get("device_kind")


def plan(args):
    """(the spec both read, the interpreter both run with) from the arguments."""
    config = load_config(*args.configfile)
    if args.device_kind:
        config["device_kind"] = args.device_kind
    row = {**definition(args.workload).overhead_row(config), "framework": args.framework, "repeat": 1}
    if args.input:
        if "input" not in row:
            raise SystemExit(f"--input: the {args.workload} point has no input kind")
        row["input"] = args.input
    spec = run_set(args.workload).build(config, row, args.threads)
    spec = dataclasses.replace(spec, convergence=Convergence(0, 1))
    venvs = Path(config["venv_prefix"] or "~/.cache/dlbench/venvs").expanduser()
    python = args.python or str(venvs / f"{args.framework}-{env_hash(REPO / 'envs' / f'{args.framework}.yaml')}"
                                / "python")
    return spec, python


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", required=True, choices=BARE)
    parser.add_argument("--framework", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4, help="epochs of the bare loop; the first is warm-up")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device-kind", choices=("auto", "cpu", "gpu"), help="the spec's device kind (default: the config's)")
    parser.add_argument("--input", choices=INPUTS, help="the point's input kind (ChestX-ray; default: synthetic)")
    parser.add_argument("--python", help="the interpreter of both (default: the framework's venv)")
    parser.add_argument("--configfile", nargs="+", default=[REPO / "config.yaml"])
    parser.add_argument("--out", type=Path, help="append a CSV row per round here")
    args = parser.parse_args(argv)
    spec, python = plan(args)
    kind = getattr(spec, "input", None)
    ratios = []
    with tempfile.TemporaryDirectory() as workdir:
        spec_file = Path(workdir) / "spec.json"
        spec_file.write_text(spec_to_json(spec))
        for round_ in range(1, args.rounds + 1):
            order = ("harness", "bare") if round_ % 2 else ("bare", "harness")
            rates, devices = {}, {}
            for which in order:
                rates[which], devices[which] = (
                    run_harness(python, spec_file, workdir) if which == "harness"
                    else run_bare(python, spec_file, args.workload, args.framework, args.epochs))
            if devices["bare"] is not None and devices["bare"] != devices["harness"]:
                raise SystemExit(f"the harness ran on the {devices['harness']}, the bare loop on the "
                                 f"{devices['bare']}: not a comparison")
            ratios.append(rates["harness"] / rates["bare"])
            print(f"{args.workload} {args.framework} ({devices['harness']}, input {kind}, gpu_float32 "
                  f"{spec.gpu_float32}) round {round_}: "
                  f"harness {rates['harness']:.1f}/s, bare {rates['bare']:.1f}/s, ratio {ratios[-1]:.3f}", flush=True)
            if args.out:
                new = not args.out.exists()
                with open(args.out, "a") as f:
                    if new:
                        f.write(",".join(CSV_COLUMNS) + "\n")
                    f.write(f"{args.workload},{args.framework},{devices['harness']},{kind or ''},{spec.gpu_float32},"
                            f"{round_},"
                            f"{rates['harness']:.3f},{rates['bare']:.3f},{ratios[-1]:.4f}\n")
    print(f"{args.workload} {args.framework} ({devices['harness']}, input {kind}, gpu_float32 {spec.gpu_float32}): "
          f"harness / bare "
          f"{statistics.median(ratios):.3f} (median of {len(ratios)} rounds, range {min(ratios):.3f} to "
          f"{max(ratios):.3f})")


if __name__ == "__main__":
    sys.exit(main())
