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
from dlbench.frameworks import FRAMEWORKS
from dlbench.specs import SpecError, spec_from_dict, spec_to_dict, spec_to_json
from dlbench.workloads.imdb.definition import spec as imdb_spec
from specs import smoke_spec

# What the frameworks ship: TensorFlow and XLA flush denormals in their CPU kernels.
FLUSH_BY_DEFAULT = {"tensorflow", "jax", "keras-tensorflow", "keras-jax"}


def config_without_numerics(tmp_path):
    text = "\n".join(line for line in (REPO / "config.yaml").read_text().splitlines()
                     if not line.startswith("numerics:"))
    path = tmp_path / "config.yaml"
    path.write_text(text + "\n")
    return path


def test_denormals_are_flushed_unless_the_config_says_otherwise(tmp_path):
    path = config_without_numerics(tmp_path)
    assert load_config(path)["numerics"] == {"denormals": "flush"}
    assert yaml.safe_load((REPO / "config.yaml").read_text())["numerics"] == {"denormals": "flush"}
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
        numerics.mode_of("fast")


def test_framework_default_changes_nothing_and_flush_sets_ftz_and_daz_for_new_threads():
    before = numerics.mxcsr()
    assert numerics.apply("framework-default") == "framework-default" and numerics.mxcsr() == before
    code = ("import json; from dlbench import numerics; mode = numerics.apply('flush'); "
            "print(json.dumps([mode, numerics.mxcsr(), numerics.numpy_thread_flushes()]))")
    mode, bits, thread_flushes = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                                           text=True, check=True).stdout)
    if not numerics.supported():
        assert mode == "unsupported" and bits is None
        return
    assert mode == "flush" and bits & numerics.FTZ and bits & numerics.DAZ and thread_flushes


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_the_policy_is_what_each_framework_computes_with(framework):
    """The policy applied as the training process applies it, the framework set up on the CPU:
    with flush, denormals are zero in this thread, a new numpy thread and the framework's own
    ops and threads; with framework-default, each framework as it ships."""
    if not numerics.supported():
        pytest.skip("the flush policy is set on x86-64 Linux only")
    seen = {}
    for policy in numerics.POLICIES:
        proc = subprocess.run([venv_python(framework), "-m", "dlbench.numerics", "--framework", framework,
                               "--policy", policy], cwd=REPO, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen[policy] = json.loads(proc.stdout.strip().splitlines()[-1])
    flush, default = seen["flush"], seen["framework-default"]
    assert flush["mode"] == "flush"
    assert flush["mxcsr_ftz"] and flush["mxcsr_daz"], flush
    assert flush["numpy_thread_flushes"] and flush["framework_flushes"], flush
    assert not default["mxcsr_ftz"] and not default["mxcsr_daz"] and not default["numpy_thread_flushes"], default
    assert default["framework_flushes"] == (framework in FLUSH_BY_DEFAULT), default
