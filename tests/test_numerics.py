"""One numerics policy for every framework (dlbench.numerics): the config key and its default,
the spec field, the policy in this interpreter, and, slow, the policy measured in each of the
seven frameworks' environments."""
import json
import subprocess
import sys

import numpy as np
import pytest
import yaml

from conftest import REPO, venv_python
from dlbench import numerics
from dlbench.config import load_config
from dlbench.contract import Placement
from dlbench.frameworks import FRAMEWORKS
from dlbench.specs import SpecError, spec_from_dict, spec_to_dict, spec_to_json
from dlbench.workloads.imdb.definition import spec as imdb_spec
from specs import smoke_spec

# What the frameworks ship: TensorFlow and XLA flush denormals in their CPU kernels.
FLUSH_BY_DEFAULT = {"tensorflow", "jax", "keras-tensorflow", "keras-jax"}
# What each framework (Keras: its engine) reads back under each GPU float32 policy.
TORCH_PRECISION = ("torch.backends.cuda.matmul.fp32_precision", "torch.backends.cudnn.conv.fp32_precision",
                   "torch.backends.cudnn.rnn.fp32_precision")
GPU_FLOAT32_SETTINGS = {
    "pytorch": {"highest": dict.fromkeys(TORCH_PRECISION, "ieee"), "tf32": dict.fromkeys(TORCH_PRECISION, "tf32")},
    "tensorflow": {policy: {"tf.config.experimental.tensor_float_32_execution_enabled": policy == "tf32"}
                   for policy in ("highest", "tf32")},
    "jax": {"highest": {"jax_default_matmul_precision": "highest"},
            "tf32": {"jax_default_matmul_precision": "tensorfloat32"}},
    "mxnet": {"highest": {"NVIDIA_TF32_OVERRIDE": "0"}, "tf32": {"NVIDIA_TF32_OVERRIDE": None}},
    "chainer": {"highest": {"CUPY_TF32": "0"}, "tf32": {"CUPY_TF32": "1"}},
}


def config_without_numerics(tmp_path):
    text = "\n".join(line for line in (REPO / "config.yaml").read_text().splitlines()
                     if not line.startswith("numerics:"))
    path = tmp_path / "config.yaml"
    path.write_text(text + "\n")
    return path


def test_denormals_are_flushed_and_gpu_products_are_float32_unless_the_config_says_otherwise(tmp_path):
    path = config_without_numerics(tmp_path)
    assert load_config(path)["numerics"] == {"denormals": "flush", "gpu_float32": "highest", "allocator": "fixed"}
    assert yaml.safe_load((REPO / "config.yaml").read_text())["numerics"] == {"denormals": "flush",
                                                                             "gpu_float32": "highest",
                                                                             "allocator": "fixed"}
    tf32 = tmp_path / "tf32.yaml"
    tf32.write_text("numerics: {gpu_float32: tf32}\n")
    assert load_config(path, tf32)["numerics"] == {"denormals": "flush", "gpu_float32": "tf32", "allocator": "fixed"}
    half = tmp_path / "half.yaml"
    half.write_text("numerics: {gpu_float32: bf16}\n")
    with pytest.raises(Exception, match="bf16"):
        load_config(path, half)
    other = tmp_path / "default.yaml"
    other.write_text("numerics: {denormals: framework-default}\n")
    assert load_config(path, other)["numerics"]["denormals"] == "framework-default"
    bad = tmp_path / "bad.yaml"
    bad.write_text("numerics: {denormals: fast}\n")
    with pytest.raises(Exception, match="fast"):
        load_config(path, bad)


def test_every_run_carries_the_policy_in_its_spec(tmp_path):
    spec = smoke_spec("imdb", "mxnet")
    assert spec.numerics == "flush"
    assert spec_from_dict(json.loads(spec_to_json(spec))) == spec
    other = tmp_path / "default.yaml"
    other.write_text("numerics: {denormals: framework-default}\n")
    config = load_config(REPO / "config.yaml", REPO / "presets" / "smoke.yaml", other)
    row = {"framework": "pytorch", "batch": 32, "workers": 0, "grad": "dense", "repeat": 1}
    assert imdb_spec(config, row, 2).numerics == "framework-default"
    assert spec.gpu_float32 == "highest" and imdb_spec(config, row, 2).gpu_float32 == "highest"
    for workload in ("mnist", "chestxray", "chestxray-loader"):
        assert smoke_spec(workload, "jax").numerics == "flush"
    stale = spec_to_dict(spec)
    del stale["numerics"]
    with pytest.raises(SpecError, match="missing key.*numerics"):
        spec_from_dict(stale)


def test_the_probe_multiplies_denormals_not_zeros():
    values = numerics.denormals(8)
    assert values.dtype == np.float32
    assert (values > 0).all() and (values < np.finfo(np.float32).tiny).all()
    assert numerics.flushed(np.zeros(3)) and not numerics.flushed(values)
    with pytest.raises(ValueError, match="flush, framework-default"):
        numerics.applied("fast")


def rounded(values, bits):
    """float32 values rounded to `bits` significand bits, as TF32 (10) or bfloat16 (7) rounds them."""
    drop = 23 - bits
    if drop == 0:
        return values
    whole = values.view(np.uint32).astype(np.uint64) + (1 << (drop - 1))
    return ((whole >> drop) << drop).astype(np.uint32).view(np.float32)


def test_the_product_probe_tells_float32_from_tf32_from_less():
    a, b = numerics.product_operands()
    assert a.dtype == b.dtype == np.float32

    def product(bits):  # the inputs rounded, the products summed exactly (float64), as a tensor core does
        return (rounded(a, bits).astype(np.float64) @ rounded(b, bits).astype(np.float64)).astype(np.float32)

    assert numerics.product_precision(a, b, a @ b)["precision"] == "float32"
    assert numerics.product_precision(a, b, product(10))["precision"] == "tf32"
    assert numerics.product_precision(a, b, product(7))["precision"] == "lower"
    assert numerics.product_precision(a, b, a @ b)["median_relative_error"] < 1e-6


class ProductBackend:
    """An adapter whose products are rounded to `bits` significand bits (23: float32)."""

    def __init__(self, bits):
        self.bits = bits

    def float32_product(self, a, b, placement):
        return (rounded(a, self.bits).astype(np.float64) @ rounded(b, self.bits).astype(np.float64)).astype(np.float32)


def test_the_record_says_whether_the_gpu_computed_with_the_policys_precision():
    gpu, cpu = Placement(0, 1, "gpu", 1, 1), Placement(0, 1, "cpu", 1, 1)
    tf32_products, float32_products = ProductBackend(10), ProductBackend(23)
    followed = {(policy, name, placement.device_kind): numerics.gpu_float32_record(policy, {}, adapter, placement)["followed"]
                for policy in numerics.GPU_FLOAT32 for name, adapter in (("tf32", tf32_products),
                                                                          ("float32", float32_products))
                for placement in (gpu, cpu)}
    assert followed == {("highest", "tf32", "gpu"): False, ("highest", "float32", "gpu"): True,
                        ("tf32", "tf32", "gpu"): True, ("tf32", "float32", "gpu"): False,
                        **{(policy, name, "cpu"): None for policy in numerics.GPU_FLOAT32
                           for name in ("tf32", "float32")}}
    record = numerics.gpu_float32_record("highest", {"switch": "off"}, tf32_products, gpu)
    assert record["precision"] == "tf32" and record["settings"] == {"switch": "off"} and record["device_kind"] == "gpu"
    with pytest.raises(ValueError, match="highest, tf32"):
        numerics.gpu_float32_record("fp16", {}, tf32_products, gpu)


def test_framework_default_changes_nothing_and_flush_sets_ftz_and_daz_for_new_threads():
    before = numerics.mxcsr()
    assert numerics.apply("framework-default") == "framework-default" and numerics.mxcsr() == before
    code = ("import json; from dlbench import numerics; done = numerics.apply('flush'); "
            "print(json.dumps([done, numerics.mxcsr(), numerics.numpy_thread_flushes()]))")
    done, bits, thread_flushes = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                           text=True, check=True).stdout)
    if not numerics.supported():
        assert done == "unsupported" and bits is None
        return
    assert done == "flush" and bits & numerics.FTZ and bits & numerics.DAZ and thread_flushes


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_the_policy_is_what_each_framework_computes_with(framework):
    """The policy applied as the training process applies it, the framework set up on the CPU:
    with flush, denormals are zero in this thread, a new numpy thread and the framework's own
    ops and threads; with framework-default, each framework as it ships."""
    if not numerics.supported():
        pytest.skip("the flush policy is set on x86-64 Linux only")
    seen = {}
    for policy, gpu_float32 in zip(numerics.POLICIES, ("tf32", "highest")):
        proc = subprocess.run([venv_python(framework), "-m", "dlbench.numerics_probe", "--framework", framework,
                               "--policy", policy, "--gpu-float32", gpu_float32], cwd=REPO, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen[policy] = json.loads(proc.stdout.strip().splitlines()[-1])
    flush, default = seen["flush"], seen["framework-default"]
    # the GPU float32 policy, read back from the framework after setup; on the CPU, products are float32
    engine = FRAMEWORKS[framework].engine or framework
    assert flush["gpu_float32"]["settings"] == GPU_FLOAT32_SETTINGS[engine]["tf32"], flush["gpu_float32"]
    assert default["gpu_float32"]["settings"] == GPU_FLOAT32_SETTINGS[engine]["highest"], default["gpu_float32"]
    for measured in (flush["gpu_float32"], default["gpu_float32"]):
        assert (measured["device_kind"], measured["precision"], measured["followed"]) == ("cpu", "float32", None)
    assert flush["applied"] == "flush"
    assert flush["mxcsr_ftz"] and flush["mxcsr_daz"], flush
    assert flush["numpy_thread_flushes"] and flush["framework_flushes"], flush
    assert not default["mxcsr_ftz"] and not default["mxcsr_daz"] and not default["numpy_thread_flushes"], default
    assert default["framework_flushes"] == (framework in FLUSH_BY_DEFAULT), default
