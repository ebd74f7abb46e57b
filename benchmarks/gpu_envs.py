"""What the GPU env files resolve to on PyPI, without installing anything.

    python benchmarks/gpu_envs.py [envs/gpu/pytorch.yaml ...]
        per env file (default: every one in envs/gpu/): the resolved versions of its framework
        packages and of its CUDA packages, the CUDA major versions they are built for, and the
        download size (the chosen wheels and sdists, from PyPI's JSON index).

pip resolves the env file's pip list as a machine without this one's pip configuration would
(`pip install --dry-run --report`): PyPI only, no local wheels, no constraints. tests/test_gpu_envs.py
resolves with the same functions.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from dlbench.envs import read_env_file

REPO = Path(__file__).resolve().parents[1]
PYPI_SIMPLE = "https://pypi.org/simple"
# The distributions that are a framework or its CUDA plugin, as the report names them.
FRAMEWORK_PACKAGES = {"torch", "tensorflow", "keras", "jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt",
                      "jax-cuda13-plugin", "jax-cuda13-pjrt", "mxnet-cu112", "mxnet-cu117", "chainer",
                      "onnxruntime-gpu", "flax", "optax", "triton"}


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def resolve(env_file):
    """[(name, version, url)] that pip would install for the env file's pip list, on PyPI alone."""
    env = read_env_file(env_file)
    # This machine's pip configuration (local wheels, a constraints file) is not a GPU machine's.
    pip_env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    with tempfile.TemporaryDirectory() as tmp:
        requirements, report = Path(tmp) / "requirements.txt", Path(tmp) / "report.json"
        requirements.write_text("\n".join(env.pip) + "\n")
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                               "--disable-pip-version-check", "--index-url", f"{PYPI_SIMPLE}/",
                               "--report", str(report), "-r", str(requirements)],
                              env=pip_env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{env_file}: pip does not resolve its pip list:\n{proc.stderr[-3000:]}")
        items = json.loads(report.read_text())["install"]
    return [(canonical(i["metadata"]["name"]), i["metadata"]["version"], i["download_info"]["url"]) for i in items]


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


def download_sizes(resolved):
    """{file name: bytes} of the resolved files, from PyPI's JSON simple index (PEP 691, 700)."""
    sizes = {}
    for name, _, url in resolved:
        request = urllib.request.Request(f"{PYPI_SIMPLE}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            files = {f["filename"]: f.get("size") for f in json.load(response)["files"]}
        filename = url.rsplit("/", 1)[-1]
        sizes[filename] = files[filename]
    return sizes


def table(env_file):
    """The report's lines for one env file."""
    resolved = resolve(env_file)
    sizes = download_sizes(resolved)
    total = sum(sizes.values())
    majors = sorted({m for name, version, _ in resolved if (m := cuda_major(name, version)) is not None})
    lines = [f"{Path(env_file).relative_to(REPO)}: {len(resolved)} distributions, {total / 1e9:.2f} GB to download, "
             f"CUDA {', '.join(map(str, majors)) or 'none'}"]
    for name, version, url in sorted(resolved):
        if name in FRAMEWORK_PACKAGES or is_cuda_package(name):
            lines.append(f"  {name}=={version}  {sizes[url.rsplit('/', 1)[-1]] / 1e6:8.1f} MB")
    return lines


def main():
    env_files = [Path(arg).resolve() for arg in sys.argv[1:]] or sorted((REPO / "envs" / "gpu").glob("*.yaml"))
    for env_file in env_files:
        print("\n".join(table(env_file)), flush=True)


if __name__ == "__main__":
    main()
