#!/usr/bin/env bash
# Mixed precision on one GPU (#55): DenseNet-121 at batch 64 in float32, mixed bfloat16 and mixed
# float16 (dynamic loss scaling), each run's record measuring the precision it ran in, for PyTorch,
# JAX, and Keras on JAX and on torch when keras is importable (benchmarks/precision.py, one round:
# PRECISION_ROUNDS); then the harness's overhead (#33 item 3): harness / bare for PyTorch and JAX DenseNet-121
# at batch 64, synthetic and device inputs, under both float32 policies (full float32, then TF32),
# 2 interleaved rounds each (benchmarks/overhead.py),
# and the host's cost of one batch's input path before and after (benchmarks/input_copy.py).
# For a lent GPU machine whose frameworks are installed in one interpreter (python3, or
# $PYTHON), without the workflow's venvs or internet. Everything ends by DEADLINE seconds
# (default 540, inside a 10-minute command): a step that would start later is skipped, and one
# running then is stopped (overhead.py writes each round's row as it ends). Most of the time is
# process starts, cuDNN's and XLA's autotuning and XLA's compilation. From the repository root:
#
#     bash benchmarks/gpu_check.sh            # writes $OUT (default results/gpu-check):
#         precision.csv    a row per run: framework, precision, samples/s, the measured precision, followed
#         overhead.csv     a row per round: workload, framework, device, input, gpu_float32, harness and bare /s, ratio
#         input_copy.txt   the input path's host time per step, median and range
#         gpu_check.log    everything printed
#
# What it needs that such a machine may lack, carried as wheels in .whl/ (ignored by git; the
# script installs them into /tmp/site when the folder is there): snakemake (load_config
# validates the config with it), grain (the JAX harness's evaluation loader) and, for the Keras
# rows of the precision check, keras (add keras==<envs/keras-jax.yaml's pin> and its pure-Python
# dependencies absl-py namex optree rich ml-dtypes h5py to the download below). On this
# repository's machine, for Python 3.12:
#
#     python -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#       -d .whl snakemake==9.27.1 snakemake-interface-common==1.23.0 snakemake-interface-logger-plugins==2.1.0 \
#       snakemake-interface-storage-plugins==4.4.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 \
#       referencing==0.37.0 rpds-py==0.30.0 jsonpointer==3.1.1 rfc3339-validator==0.1.4 dpath==2.2.0 \
#       tenacity==9.2.1 yte==1.9.4 grain==0.2.18 array-record==0.8.6 portpicker==1.6.0
#
# (what `from dlbench.config import load_config` imports beyond numpy, PyYAML, attrs, idna, six
# and typing_extensions, checked in an interpreter without site-packages; grain's own needs
# beyond absl-py, cloudpickle, etils, numpy and protobuf.)
#
# The data: a DenseNet-121 spec at overhead.py's point reads the prepared label file (its
# training rows size the epoch and the synthetic pool) and, for the harness's final test
# evaluation, the preprocessed test images through the image manifest the spec names. The
# workflow's label rule needs the torchxrayvision wheel (the NIH label file); instead this
# writes a label file of synthetic rows (TRAIN training images, 8 validation, 8 test; random
# findings) with the project's own writer, and then runs the workflow's two image rules' scripts
# as the rules do: prepare.py images draws the synthetic 1024x1024 PNGs, preprocess.py resizes
# them to 264 JPEGs (with this interpreter's Pillow, under the manifest name the spec reads,
# pillow-simd-jpeg.csv). Neither input kind reads a training image; they are there as the
# workflow would have them. It writes results/data/chestxray and stops if that is there.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results/gpu-check}
PYTHON=${PYTHON:-python3}
TRAIN=${TRAIN:-1280}      # 20 steps of 64 per bare epoch
EPOCHS=${EPOCHS:-3}       # bare epochs, the first warm-up
DEADLINE=${DEADLINE:-540}  # seconds from the start
ROUNDS=${ROUNDS:-2}
FLOAT32=${FLOAT32:-"highest tf32"}  # the float32 policies to compare, in this order
THREADS=${THREADS:-4}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
# the lent machine's frameworks are not the env files' pins: their private API is run as it is, and
# every record says so (config private_api_override, dlbench.frameworks.check_written_for)
export DLBENCH_PRIVATE_API_OVERRIDE=1
# XLA's compilations kept across the runs' processes: each trace compiles once (not timed either way)
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/dlbench-jax-cache}
if [ -d .whl ]; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site" || { echo "the carried wheels did not install"; exit 1; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
git describe --always --dirty 2>/dev/null
"$PYTHON" - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "jax", "flax", "optax", "grain", "PIL", "yaml", "snakemake", "psutil", "pynvml"):
    try:
        module = importlib.import_module(name)
        print(f"  {name} {getattr(module, '__version__', '')}")
    except ImportError as err:
        print(f"  {name} MISSING: {err}")
EOF

DATA=results/data/chestxray
if [ -e "$DATA" ]; then
  echo "$DATA is there: this check writes its own minimal data; run it in a copy without it"; exit 1
fi
start=$SECONDS
"$PYTHON" - "$DATA/labels.csv" "$TRAIN" <<'EOF' || exit 1
import sys
from pathlib import Path

import numpy as np

from dlbench.workloads.chestxray.labels import FINDINGS, LabelRow, write_labels_csv

path, train = Path(sys.argv[1]), int(sys.argv[2])
path.parent.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(42)
counts, rows, i = {"train": train, "valid": 8, "test": 8}, {}, 0
for split, n in counts.items():
    rows[split] = []
    for _ in range(n):
        rows[split].append(LabelRow(f"{i:08d}_000.png", i, (rng.random(len(FINDINGS)) < 0.1).astype(np.uint8)))
        i += 1
write_labels_csv(path, rows)
print(f"{path}: {counts} synthetic label rows")
EOF
"$PYTHON" src/dlbench/workloads/chestxray/scripts/prepare.py images --labels "$DATA/labels.csv" \
  --synthetic-dir "$DATA/synthetic" --seed 42 --threads 16 --manifest "$DATA/images.csv" || exit 1
"$PYTHON" src/dlbench/workloads/chestxray/scripts/preprocess.py --manifest "$DATA/images.csv" --reader pillow \
  --format jpeg --size 264 --threads 16 --out-dir "$DATA/264/pillow-simd-jpeg" \
  --out-manifest "$DATA/264/pillow-simd-jpeg.csv" || exit 1
echo "data: $((SECONDS - start)) s"

# DenseNet-121 at batch 64 on the GPU; units of at least 1 s and 10 steps, evaluation in-thread.
CONFIG=/tmp/dlbench-gpu-check.yaml
cat > "$CONFIG" <<EOF
device: gpu
measurement: {steady_units: 3, min_unit_seconds: 1.0, min_unit_steps: 10, max_warmup_units: 2}
chestxray:
  blocks: [6, 12, 24, 16]
  batch: 64
  subset: {train: $TRAIN, valid: 8, test: 8}
  devices: [1]
  workers: 0
EOF

start=$SECONDS
timeout 60 "$PYTHON" benchmarks/input_copy.py --steps 50 --threads "$THREADS" | tee "$OUT/input_copy.txt"
echo "input_copy: $((SECONDS - start)) s"
# Both float32 policies (numerics.gpu_float32) on the synthetic input first (the harness's own
# question), then on the device input: what the deadline cuts is the last of these.
# The precisions first: float32 against the 16-bit policies, every framework that is installed.
PRECISION_ROUNDS=${PRECISION_ROUNDS:-1}
PRECISION_FRAMEWORKS=${PRECISION_FRAMEWORKS:-"pytorch jax keras-jax keras-torch"}
for framework in $PRECISION_FRAMEWORKS; do
  if [[ $framework == keras-* ]] && ! "$PYTHON" -c "import keras" 2>/dev/null; then
    echo "precision $framework SKIPPED: keras is not installed (carry its wheel in .whl/)"; continue
  fi
  left=$((DEADLINE / 2 - SECONDS))  # half the time: the overhead rounds below keep the other half
  if [ "$left" -lt 60 ]; then echo "precision $framework SKIPPED: ${left} s left of its half"; continue; fi
  start=$SECONDS
  timeout "$left" "$PYTHON" benchmarks/precision.py --workload chestxray --framework "$framework" \
    --precisions float32 mixed-bfloat16 mixed-float16 --rounds "$PRECISION_ROUNDS" --device-kind gpu \
    --python "$PYTHON" --threads "$THREADS" --configfile config.yaml "$CONFIG" --out "$OUT/precision.csv" \
    || echo "precision $framework FAILED"
  echo "precision $framework: $((SECONDS - start)) s"
done
for float32 in $FLOAT32; do echo "numerics: {gpu_float32: $float32}" > "/tmp/dlbench-gpu-check-$float32.yaml"; done
for input in synthetic resident; do
  for float32 in $FLOAT32; do
    for framework in pytorch jax; do
      left=$((DEADLINE - SECONDS))
      if [ "$left" -lt 40 ]; then echo "overhead $framework $input $float32 SKIPPED: ${left} s left"; continue; fi
      start=$SECONDS
      timeout "$left" "$PYTHON" benchmarks/overhead.py --workload chestxray --framework "$framework" --input "$input" \
        --device-kind gpu --python "$PYTHON" --rounds "$ROUNDS" --epochs "$EPOCHS" --threads "$THREADS" \
        --configfile config.yaml "$CONFIG" "/tmp/dlbench-gpu-check-$float32.yaml" --out "$OUT/overhead.csv" \
        || echo "overhead $framework $input $float32 FAILED"
      echo "overhead $framework $input $float32: $((SECONDS - start)) s"
    done
  done
done
cat "$OUT/precision.csv" "$OUT/overhead.csv"
