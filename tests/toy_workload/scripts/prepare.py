"""Synthetic, nearly separable two-class data: x ~ N(0, 1), y = [x . w + noise > 0]."""
import argparse
from pathlib import Path

import numpy as np

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--outdir", type=Path, required=True)
parser.add_argument("--sizes", type=int, nargs=3, required=True, metavar=("FEATURES", "TRAIN", "TEST"))
parser.add_argument("--seed", type=int, required=True)
args = parser.parse_args()
features, train, test = args.sizes
rng = np.random.default_rng(args.seed)
w = rng.standard_normal(features)
x = rng.standard_normal((train + test, features)).astype(np.float32)
y = (x @ w + 0.1 * rng.standard_normal(train + test) > 0).astype(np.int64)
args.outdir.mkdir(parents=True, exist_ok=True)
for name, array in (("train-x", x[:train]), ("train-y", y[:train]), ("test-x", x[train:]), ("test-y", y[train:])):
    np.save(args.outdir / f"{name}.npy", array)
