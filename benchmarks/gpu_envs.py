"""What the GPU env files resolve to on PyPI, without installing anything.

    python benchmarks/gpu_envs.py [envs/gpu/pytorch.yaml ...]
        per env file (default: every one in envs/gpu/): the resolved versions of its framework
        packages and of its CUDA packages, the CUDA major versions they are built for, and the
        download size (the chosen wheels, or sdists where a package has no wheel).

uv, the installer that builds the venvs (scripts/build_venv.py), resolves the env file's pip list
as a GPU machine without this one's configuration would (`uv pip compile --format pylock.toml`):
PyPI only, Linux x86_64 (manylinux_2_28), the file's Python. pip's `install --dry-run` took 5 to
80 s a file here, uv about 2. tests/test_gpu_envs.py resolves with the same functions.
"""
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from uv import find_uv_bin

from dlbench.envs import read_env_file

REPO = Path(__file__).resolve().parents[1]
PYPI_SIMPLE = "https://pypi.org/simple"
GPU_PLATFORM = "x86_64-manylinux_2_28"  # the NVIDIA machines' (glibc 2.28 or later)
# The distributions that are a framework or its CUDA plugin, as the report names them.
FRAMEWORK_PACKAGES = {"torch", "tensorflow", "keras", "jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt",
                      "jax-cuda13-plugin", "jax-cuda13-pjrt", "mxnet-cu112", "mxnet-cu117", "chainer",
                      "onnxruntime-gpu", "flax", "optax", "triton"}


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(env_file):
    """[(name, version, url, size in bytes)] that uv installs for the env file's pip list on a GPU
    machine: PyPI alone, each package's wheel for that platform (its sdist where it has none)."""
    env = read_env_file(env_file)
    # This machine's configuration (a local index, a constraints file) is not a GPU machine's.
    uv_env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    with tempfile.TemporaryDirectory() as tmp:
        requirements, lock = Path(tmp) / "requirements.txt", Path(tmp) / "pylock.toml"
        requirements.write_text("\n".join(env.pip) + "\n")
        proc = subprocess.run([find_uv_bin(), "pip", "compile", "--no-config", "--quiet", "--index-url",
                               f"{PYPI_SIMPLE}/", "--python-version", env.python, "--python-platform",
                               GPU_PLATFORM, "--format", "pylock.toml", "--output-file", str(lock),
                               str(requirements)], env=uv_env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{env_file}: uv does not resolve its pip list:\n{proc.stderr[-3000:]}")
        packages = tomllib.loads(lock.read_text())["packages"]
    return [(canonical(p["name"]), p["version"], file["url"], file["size"])
            for p in packages for file in [(p.get("wheels") or [p.get("sdist")])[0]]]


def cuda_major(name, version):
    """The CUDA major version a resolved distribution is built for, None where it says none.

    nvidia-*-cuNN and jax-cudaNN-* name it; mxnet-cuXYZ names CUDA X.Y (the last digit is the
    minor); CUDA 13's wheels drop the suffix, and then the CUDA toolkit's own components (runtime,
    NVRTC, CUPTI, NVCC, the cuda-toolkit meta-package, cuda-bindings) carry it as their major
    version. The libraries' own versions (cuBLAS, cuFFT, ...) are not CUDA's: their CUDA is the
    one cuda-toolkit pins them for."""
    name = canonical(name)
    if match := re.fullmatch(r"nvidia-.+-cu(\d+)|jax-cuda(\d+)-.+", name):
        return int(match.group(1) or match.group(2))
    if match := re.fullmatch(r"mxnet-cu(\d+)\d", name):
        return int(match.group(1))
    if name in {"cuda-toolkit", "cuda-bindings"} or re.fullmatch(r"nvidia-cuda-(runtime|nvrtc|cupti|nvcc)", name):
        return int(version.split(".")[0])
    return None


def is_cuda_package(name):
    return cuda_major(name, "0") is not None or canonical(name).startswith(("nvidia-", "cuda-"))


def table(env_file):
    """The report's lines for one env file."""
    resolved = resolve(env_file)
    total = sum(size for *_, size in resolved)
    majors = sorted({m for name, version, *_ in resolved if (m := cuda_major(name, version)) is not None})
    lines = [f"{Path(env_file).relative_to(REPO)}: {len(resolved)} distributions, {total / 1e9:.2f} GB to download, "
             f"CUDA {', '.join(map(str, majors)) or 'none'}"]
    for name, version, _, size in sorted(resolved):
        if name in FRAMEWORK_PACKAGES or is_cuda_package(name):
            lines.append(f"  {name}=={version}  {size / 1e6:8.1f} MB")
    return lines


def main():
    env_files = [Path(arg).resolve() for arg in sys.argv[1:]] or sorted((REPO / "envs" / "gpu").glob("*.yaml"))
    for env_file in env_files:
        print("\n".join(table(env_file)), flush=True)


if __name__ == "__main__":
    main()
