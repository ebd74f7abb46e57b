"""Synthetic ChestX-ray-like images (when no NIH images are given): smooth noise and soft
ellipses, drawn from the image's name and the seed."""
import zlib

import numpy as np

from dlbench.workloads.chestxray.images import ORIGINAL_SIZE
from dlbench.workloads.chestxray.labels import read_labels_csv


# Synthetic mode keeps at most this many random images in memory and reuses them by index
# (index % pool): a float32 3x224x224 image is 602 KB, the full training split would be 47 GB.
SYNTHETIC_POOL = 256
SYNTHETIC_PNG_COMPRESSION = 1  # the synthetic 1024x1024 PNGs: 3x faster to write than 6, 15% larger


def _smooth_noise(rng, size, cells):
    """Low-frequency noise: a cells x cells random grid, bilinearly upsampled to size x size
    (separably, with elementwise numpy: no BLAS threads)."""
    grid = rng.standard_normal((cells, cells)).astype(np.float32)
    position = np.linspace(0, cells - 1, size, dtype=np.float32)
    low = np.clip(np.floor(position).astype(np.int64), 0, cells - 2)
    weight = position - low
    columns = grid[:, low] * (1 - weight) + grid[:, low + 1] * weight          # cells x size
    return columns[low] * (1 - weight)[:, None] + columns[low + 1] * weight[:, None]


def _soft_ellipse(y, x, cy, cx, ry, rx, edge=0.08):
    """1 inside the ellipse, 0 outside, a smooth ramp of relative width `edge` across its border."""
    r = np.sqrt(((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2)
    return np.clip((1 + edge - r) / (2 * edge), 0, 1)


def synthetic_image(name, seed, size=ORIGINAL_SIZE):
    """A grayscale uint8 size x size image that looks vaguely like a frontal chest X-ray: a bright
    body, two dark lungs, a bright spine and heart shadow, low-frequency texture and fine grain.
    Deterministic in (name, seed); a few hundredths of a second at 1024 x 1024 (the anatomy is
    drawn at half the size and doubled; the texture and grain are drawn at full size)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    jitter = rng.uniform(-0.03, 0.03, 8).astype(np.float32)
    half = (size + 1) // 2
    coords = np.linspace(0, 1, half, dtype=np.float32)
    y, x = coords[:, None], coords[None, :]
    body = _soft_ellipse(y, x, 0.55, 0.5, 0.55 + jitter[0], 0.45 + jitter[1], edge=0.05)
    lungs = (_soft_ellipse(y, x, 0.45 + jitter[2], 0.3 + jitter[3], 0.28, 0.14)
             + _soft_ellipse(y, x, 0.45 + jitter[4], 0.7 + jitter[5], 0.28, 0.14))
    heart = _soft_ellipse(y, x, 0.62 + jitter[6], 0.55 + jitter[7], 0.13, 0.12, edge=0.2)
    spine = np.exp(-(((x - 0.5) / 0.04) ** 2))
    anatomy = 36 + 150 * body - 110 * lungs + 60 * heart * lungs + 50 * spine * body
    image = anatomy.repeat(2, axis=0).repeat(2, axis=1)[:size, :size]
    image += 12 * _smooth_noise(rng, size, 12) + 4 * _smooth_noise(rng, size, 48)
    image += rng.integers(0, 9, (size, size), dtype=np.uint8)  # grain: PNGs of a realistic size
    return np.clip(image, 0, 255).astype(np.uint8)


def save_png(image, path, compress_level=SYNTHETIC_PNG_COMPRESSION):
    """A uint8 grayscale array as an 8-bit grayscale PNG (Pillow)."""
    from PIL import Image
    Image.fromarray(image).save(path, format="PNG", compress_level=compress_level)


def synthetic_sizes(spec):
    """The synthetic input of a bare loop, as the harness's: (the training split's samples, the images
    of the pool reused by index: at most SYNTHETIC_POOL)."""
    n_train = len(read_labels_csv(spec.data.labels)["train"][0])
    return n_train, min(n_train, SYNTHETIC_POOL)
