"""The GPU env files (envs/gpu/, config env_variant: gpu): which file and venv a stack takes, and
what each file resolves to on PyPI (benchmarks/gpu_envs.py prints the same per file, with sizes).

The resolutions ask pypi.org: where it cannot be reached they fail, naming the address. On a
machine without PyPI, DLBENCH_NO_PYPI=1 skips them instead (pytest's -ra summary says so per file)."""
import functools
import os
import re
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO, snakemake
from dlbench.envs import env_file, env_hash, read_env_file, venv_interpreter
from dlbench.frameworks import FRAMEWORKS

sys.path.insert(0, str(REPO / "benchmarks"))
from gpu_envs import canonical, cuda_major, resolve  # noqa: E402

ENVS = REPO / "envs"
GPU_ENV_FILES = sorted((ENVS / "gpu").glob("*.yaml"))
PREFIX = Path("/venvs")
# Chainer 7 computes on GPUs through CuPy 7, whose wheels stop at Python 3.8: no GPU build (docs/environments.md, "GPUs")
CPU_ONLY = {"chainer"}


def pins(env_path):
    """{distribution: version} of the env file's pinned packages (extras dropped)."""
    found = {}
    for line in read_env_file(env_path).pip:
        if match := re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?==(\S+)(\s+#.*)?", line.strip()):
            found[canonical(match.group(1))] = match.group(3)
    return found


def test_cpu_keeps_the_venvs_the_workflow_always_built():
    for stack in [*FRAMEWORKS, "onnx", "data", "report", "pillow"]:
        assert env_file(ENVS, stack) == env_file(ENVS, stack, "cpu") == ENVS / f"{stack}.yaml"
        assert venv_interpreter(PREFIX, ENVS, stack) == PREFIX / f"{stack}-{env_hash(ENVS / f'{stack}.yaml')}" / "python"


def test_gpu_takes_every_framework_from_envs_gpu_and_the_rest_from_envs():
    for stack in [*FRAMEWORKS, "onnx"]:
        if stack in CPU_ONLY:
            assert env_file(ENVS, stack, "gpu") == ENVS / f"{stack}.yaml"
            continue
        gpu_file = ENVS / "gpu" / f"{stack}.yaml"
        assert env_file(ENVS, stack, "gpu") == gpu_file, f"{stack} has no GPU env file"
        assert venv_interpreter(PREFIX, ENVS, stack, "gpu") == PREFIX / f"{stack}-{env_hash(gpu_file)}" / "python"
        assert venv_interpreter(PREFIX, ENVS, stack, "gpu") != venv_interpreter(PREFIX, ENVS, stack, "cpu")
    for stack in ["data", "report", "pillow"]:
        assert env_file(ENVS, stack, "gpu") == ENVS / f"{stack}.yaml"
    with pytest.raises(ValueError, match="tpu"):
        env_file(ENVS, "pytorch", "tpu")


def test_gpu_files_pin_the_cpu_files_framework_versions():
    """The GPU build of the same release: the two variants compare devices, not versions."""
    for gpu_file in GPU_ENV_FILES:
        cpu_pins, gpu_pins = pins(ENVS / gpu_file.name), pins(gpu_file)
        assert read_env_file(gpu_file).python == read_env_file(ENVS / gpu_file.name).python
        shared = {"torch", "tensorflow", "jax", "jaxlib", "keras", "numpy", "flax", "optax", "chainer"} & set(cpu_pins)
        assert shared, f"{gpu_file.name}: its CPU file pins no framework package"
        for package in shared:
            assert gpu_pins.get(package) == cpu_pins[package], (gpu_file.name, package)
        assert read_env_file(gpu_file).variables.get("KERAS_BACKEND") == read_env_file(ENVS / gpu_file.name).variables.get("KERAS_BACKEND")
    assert pins(ENVS / "gpu" / "mxnet.yaml")["mxnet-cu117"] == pins(ENVS / "mxnet.yaml")["mxnet"]


@pytest.mark.slow  # two dry runs of the default config, 40 s each
def test_env_variant_gpu_plans_the_gpu_venvs_and_the_runs_take_them(tmp_path):
    prefix = tmp_path / "venvs"
    gpu = snakemake("-n", "--config", f"venv_prefix={prefix}", "env_variant=gpu").stdout
    cpu = snakemake("-n", "--config", f"venv_prefix={prefix}").stdout
    for stack in set(FRAMEWORKS) - CPU_ONLY:
        gpu_venv, cpu_venv = (venv_interpreter(prefix, ENVS, stack, variant).parent.name for variant in ("gpu", "cpu"))
        assert f"{gpu_venv}/python" in gpu and f"{cpu_venv}/python" not in gpu, stack
        assert f"{cpu_venv}/python" in cpu and f"{gpu_venv}/python" not in cpu, stack
    data_venv = venv_interpreter(prefix, ENVS, "data").parent.name
    assert f"{data_venv}/python" in gpu and f"{data_venv}/python" in cpu


NO_PYPI = "DLBENCH_NO_PYPI"  # =1: this machine has no PyPI; the resolutions skip, saying so
PYPI_PROBE = "https://pypi.org/simple/pip/"


@functools.cache
def pypi_unreachable():
    """Why pypi.org does not answer; None where it does (asked once a session)."""
    try:
        urllib.request.urlopen(PYPI_PROBE, timeout=20).close()
        return None
    except OSError as err:
        return f"{PYPI_PROBE}: {err}"


def need_pypi(env_file):
    """Skip where the user says there is no PyPI (DLBENCH_NO_PYPI=1); fail where it is unreachable."""
    name = env_file.relative_to(REPO)
    if os.environ.get(NO_PYPI) == "1":
        pytest.skip(f"{NO_PYPI}=1: {name} not resolved on PyPI")
    if (why := pypi_unreachable()) is not None:
        pytest.fail(f"pypi.org is unreachable ({why}), so {name} cannot be resolved; "
                    f"on a machine without PyPI, set {NO_PYPI}=1 to skip these tests", pytrace=False)


@pytest.mark.slow  # uv resolves each file on PyPI: about 2 s each
@pytest.mark.parametrize("gpu_file", GPU_ENV_FILES, ids=lambda path: path.stem)
def test_gpu_env_resolves_to_its_pins_on_one_cuda_major(gpu_file):
    need_pypi(gpu_file)
    pinned = pins(gpu_file)
    assert pinned, f"{gpu_file.name} pins nothing"
    resolved = {name: version for name, version, *_ in resolve(gpu_file)}
    for package, version in pinned.items():
        assert resolved.get(package) == version, (package, version, resolved.get(package))
    majors = {name: major for name, version in resolved.items() if (major := cuda_major(name, version)) is not None}
    assert len(set(majors.values())) == 1, f"{gpu_file.name} mixes CUDA major versions or has none: {majors}"
