"""Run specs of the smoke preset for tests and by hand:

    python tests/specs.py WORKLOAD FRAMEWORK [KEY=VALUE ...] > spec.json

KEY=VALUE set the grid row's fields (e.g. devices=2 strategy=ddp input=synthetic); the
default row is the first of the smoke grid on one device.
"""
import sys
from pathlib import Path

from dlbench.config import load_config
from dlbench.definitions import run_set
from dlbench.specs import spec_to_json

REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROWS = {
    "mnist": {"model": "small", "duplicate": 1, "batch": 64, "devices": 1, "nodes": 1, "strategy": "none",
              "repeat": 1},
    "imdb": {"batch": 32, "workers": 0, "grad": "dense", "repeat": 1},
    "imdb-transformer": {"batch": 32, "workers": 0, "repeat": 1},
    "chestxray": {"input": "real", "devices": 1, "nodes": 1, "strategy": "none", "repeat": 1},
    "chestxray-loader": {"workers": 0, "repeat": 1},
    "chestxray-preprocess": {"library": "pillow-simd", "format": "jpeg", "repeat": 1},
    "chestxray-decode": {"library": "pillow-simd", "format": "jpeg", "workers": 0, "repeat": 1},
    "onnx": {"model": "mnist-small", "runtime": "onnxruntime", "batch": 2, "repeat": 1},
    "matmul": {"size": 128, "repeat": 1},
}


def smoke_config():
    return load_config(REPO / "config.yaml", REPO / "presets" / "smoke.yaml")


# One thread, as the smoke preset's runs: the tests start their runs side by side, and beside the other
# test worker's, on two cores; an OpenMP pool of two threads there spins through every barrier while its
# other thread waits for a core (two PyTorch DenseNet-21 runs side by side: 10.3 to 15.2 s and 17 to 30
# CPU-s at 2 threads each, 4.2 to 4.8 s and 8 to 9 CPU-s at 1; three pairs of each).
def smoke_spec(name, framework, threads=1, **row):
    """The smoke preset's spec of run set `name` at its default row, with `row`'s changes."""
    return run_set(name).build(smoke_config(), {**DEFAULT_ROWS[name], "framework": framework, **row}, threads)


if __name__ == "__main__":
    fields = dict(arg.split("=", 1) for arg in sys.argv[3:])
    fields = {k: int(v) if v.isdigit() else v for k, v in fields.items()}
    print(spec_to_json(smoke_spec(sys.argv[1], sys.argv[2], **fields)))
