"""ChestX-ray14 images: I/O through a reader (Pillow or OpenCV), resizing, what the image
benchmarks share, and the training and evaluation transforms. The standard library and
numpy only at import: PIL and cv2 are imported inside the functions that need them."""
from pathlib import Path

import numpy as np

from dlbench.errors import DataError


ORIGINAL_SIZE = 1024       # NIH images are 1024x1024 8-bit grayscale PNGs
RESIZED_SIZE = 264         # resized once, before training (the DenseNet-121 study)
CROP_SIZE = 224            # random crop (training) or centre crop (evaluation)
JPEG_QUALITY = 90
PNG_COMPRESSION = 6        # zlib level of resized PNGs, the same for Pillow and OpenCV (Pillow's default)
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
READERS = ("pillow", "opencv")  # the Python module that reads and writes the images
FORMATS = {"jpeg": ".jpg", "png": ".png"}  # format -> the suffix preprocessing writes
FORMAT_SUFFIXES = {"jpeg": (".jpg", ".jpeg"), "png": (".png",)}


def read_image(path, reader="pillow"):
    """An image file as a 2-D grayscale uint8 array, decoded by Pillow (or pillow-simd, whichever
    the environment has) or OpenCV; a missing or undecodable file is a DataError that names it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: missing")
    if reader == "pillow":
        from PIL import Image
        try:
            with Image.open(path) as image:
                image.load()
                if image.mode != "L":  # a few NIH PNGs are RGBA
                    image = image.convert("L")
                return np.asarray(image)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as err:
            raise DataError(f"{path}: unreadable image ({err})") from err
    if reader == "opencv":
        import cv2
        image = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
        if image is None:
            raise DataError(f"{path}: unreadable image (OpenCV could not decode it)")
        return image
    raise ValueError(f"unknown image reader {reader!r}, expected one of {READERS}")


def check_image(path):
    """None if the file decodes (Pillow, fully), else why not: 'missing' or 'unreadable (...)'."""
    try:
        read_image(path, "pillow")
    except DataError as err:
        return str(err).split(": ", 1)[1]
    return None


def resize_file(src, dst, size=RESIZED_SIZE, fmt="jpeg", reader="pillow"):
    """Read src, resize it to size x size with area averaging, save it as JPEG (quality 90) or PNG.

    Area-style averaging with both readers. OpenCV: INTER_AREA, the exact area average (a pixel
    the output pixel half covers gets half the weight). Pillow (and pillow-simd, which gives the
    same pixels): the BOX filter, the plain mean of the input pixels whose centres the output
    pixel covers. At 1024 -> 264 the two differ by at most a few grey levels (mean about 0.4).
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}, expected one of {tuple(FORMATS)}")
    if reader == "pillow":
        from PIL import Image
        path = Path(src)
        if not path.is_file():
            raise DataError(f"{path}: missing")
        try:
            with Image.open(path) as image:
                image = image.convert("L") if image.mode != "L" else image
                small = image.resize((size, size), Image.Resampling.BOX)
        except (OSError, ValueError, SyntaxError) as err:
            raise DataError(f"{path}: unreadable image ({err})") from err
        if fmt == "jpeg":
            small.save(dst, format="JPEG", quality=JPEG_QUALITY)
        else:
            small.save(dst, format="PNG", compress_level=PNG_COMPRESSION)
        return
    if reader == "opencv":
        import cv2
        small = cv2.resize(read_image(src, "opencv"), (size, size), interpolation=cv2.INTER_AREA)
        params = ([cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY] if fmt == "jpeg"
                  else [cv2.IMWRITE_PNG_COMPRESSION, PNG_COMPRESSION])
        if not cv2.imwrite(str(dst), small, params):
            raise DataError(f"{dst}: OpenCV could not write it")
        return
    raise ValueError(f"unknown image reader {reader!r}, expected one of {READERS}")


def prepare_reader(reader):
    """Import the reader's library and its decoders now (not inside the first timed image), and
    make OpenCV single-threaded: the processes are the parallelism (OpenCV would start threads
    of its own; Pillow decodes and resizes in the calling thread)."""
    if reader == "pillow":
        from PIL import Image
        Image.init()
    elif reader == "opencv":
        import cv2
        cv2.setNumThreads(1)
    else:
        raise ValueError(f"unknown image reader {reader!r}, expected one of {READERS}")


def reader_version(reader):
    """The version of the library behind a reader (pillow-simd reports e.g. '12.1.1.post0')."""
    if reader == "pillow":
        import PIL
        return PIL.__version__
    if reader == "opencv":
        import cv2
        return cv2.__version__
    raise ValueError(f"unknown image reader {reader!r}, expected one of {READERS}")


def sample_rng(seed, epoch, index):
    """The random state of one sample's augmentation, the same in every framework and loader
    (it depends on the seed, the epoch and the sample's index, not on worker or batch)."""
    return np.random.default_rng([seed, epoch, index])


def augmentation(seed, epoch, indices, size, crop=CROP_SIZE):
    """(top, left, flip) int32 arrays of the samples `indices` in `epoch`, for size x size
    images: each drawn from sample_rng(seed, epoch, index) as train_transform draws them (top,
    then left, in 0..size-crop, then a horizontal flip with p=0.5). For loaders that crop
    in their own operators (tf.data, MXNet) with the same values as every other framework."""
    params = np.empty((len(indices), 3), dtype=np.int32)
    for row, index in enumerate(np.asarray(indices).ravel()):
        rng = sample_rng(seed, epoch, int(index))
        params[row] = rng.integers(0, size - crop + 1), rng.integers(0, size - crop + 1), rng.random() < 0.5
    return params[:, 0], params[:, 1], params[:, 2]


# Every grey level's three normalised channel values, [256, 3] (and [3, 256]): normalising is
# then one table look-up per pixel, 5-10 times faster than the arithmetic and equal to it.
_NORMALISED_HWC = ((np.arange(256, dtype=np.float32) * np.float32(1 / 255))[:, None] - IMAGENET_MEAN) / IMAGENET_STD
_NORMALISED_CHW = np.ascontiguousarray(_NORMALISED_HWC.T)


def to_normalised(image, channels_last=False):
    """uint8 H x W grey -> float32 3 x H x W (or H x W x 3), grey replicated, ImageNet mean/std:
    (grey / 255 - mean[c]) / std[c]."""
    if image.dtype != np.uint8:
        raise ValueError(f"expected a uint8 image, got {image.dtype}")
    if channels_last:
        return np.take(_NORMALISED_HWC, image, axis=0)
    return np.take(_NORMALISED_CHW, image, axis=1)


def _check_size(image, crop):
    if image.ndim != 2 or image.shape[0] < crop or image.shape[1] < crop:
        raise ValueError(f"expected a 2-D grey image of at least {crop} x {crop}, got shape {image.shape}")


def train_transform(image, rng, crop=CROP_SIZE, channels_last=False):
    """Random crop (top, then left, drawn from rng), horizontal flip with p=0.5 (drawn next),
    then to_normalised. image: uint8 H x W (264 x 264 after preprocessing)."""
    _check_size(image, crop)
    top, left = rng.integers(0, image.shape[0] - crop + 1), rng.integers(0, image.shape[1] - crop + 1)
    patch = image[top:top + crop, left:left + crop]
    if rng.random() < 0.5:
        patch = patch[:, ::-1]
    return to_normalised(patch, channels_last)


def eval_transform(image, crop=CROP_SIZE, channels_last=False):
    """Centre crop, then to_normalised."""
    _check_size(image, crop)
    top, left = (image.shape[0] - crop) // 2, (image.shape[1] - crop) // 2
    return to_normalised(image[top:top + crop, left:left + crop], channels_last)
