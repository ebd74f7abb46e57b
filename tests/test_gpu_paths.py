"""The GPU code paths, exercised on a machine without one: the machine's GPU count and each
framework's are faked at the smallest seam (nvidia-smi's output, torch.cuda.device_count,
torch.distributed.init_process_group, the pynvml module) so that the real selection code runs:
device resolution and its guard, PyTorch's process-group backend and DataParallel, NVML
sampling, and the cuDNN autotune policy each adapter sets and the record keeps."""
import json
import subprocess
import textwrap

import pytest

from conftest import venv_python
from dlbench import machine, numerics
from dlbench.errors import FrameworkError, NotApplicable
from dlbench.frameworks import FRAMEWORKS
from dlbench.protocol import resolve_device
from dlbench.specs import spec_to_json
from dlbench.tables import RecordError, load_records
from specs import smoke_spec
from test_tables import record, result, spec

NVIDIA_SMI = "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\nNVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB"


def test_the_machine_s_gpus_are_read_from_nvidia_smi(monkeypatch):
    monkeypatch.setattr(machine, "_command", lambda *args: NVIDIA_SMI)
    assert machine.gpus() == [{"name": "NVIDIA H100 80GB HBM3", "driver": "550.54.15", "memory": "81559 MiB"}] * 2
    monkeypatch.setattr(machine, "_command", lambda *args: None)  # no nvidia-smi
    assert machine.gpus() == []


def test_a_framework_that_sees_fewer_gpus_than_the_machine_stops_with_its_name():
    for requested in ("auto", "gpu"):
        with pytest.raises(FrameworkError, match=r"mxnet sees 1 GPU\(s\) but this machine has 2: .*set device_kind: cpu"):
            resolve_device("mxnet", requested, visible_gpus=1, machine_gpus=2, devices=1)
    with pytest.raises(FrameworkError, match="jax sees 0 GPU"):
        resolve_device("jax", "gpu", visible_gpus=0, machine_gpus=0, devices=1)  # gpu asked for, none here


def test_more_devices_than_the_machine_has_is_not_applicable_with_the_reason():
    assert resolve_device("pytorch", "gpu", visible_gpus=2, machine_gpus=2, devices=2) == "gpu"
    with pytest.raises(NotApplicable, match="8 GPUs asked for, this machine has 2"):
        resolve_device("pytorch", "gpu", visible_gpus=2, machine_gpus=2, devices=8)
    with pytest.raises(NotApplicable, match="4 GPUs asked for, this machine has 1"):
        resolve_device("pytorch", "auto", visible_gpus=1, machine_gpus=1, devices=4)


def test_the_record_keeps_the_cudnn_autotune_policy_and_requires_it(tmp_path):
    settings = {"policy": "on", "settings": {"torch.backends.cudnn.benchmark": True}}
    kept = record(spec(), {**result(2.0, 1.0, 1.0), "cudnn_autotune": settings}, 0, [], "now", 1.0)
    assert kept["cudnn_autotune"] == settings and "cudnn_autotune" not in kept["extra"]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(kept))
    assert load_records([path])[0]["cudnn_autotune"] == settings
    del kept["cudnn_autotune"]
    path.write_text(json.dumps(kept))
    with pytest.raises(RecordError, match="cudnn_autotune"):
        load_records([path])


def test_xla_flags_get_the_policy_s_autotune_level_and_keep_the_others():
    assert numerics.xla_flags_with_autotune("", True) == "--xla_gpu_autotune_level=4"
    assert (numerics.xla_flags_with_autotune("--xla_force_host_platform_device_count=2 --xla_gpu_autotune_level=4",
                                             False)
            == "--xla_force_host_platform_device_count=2 --xla_gpu_autotune_level=0")


def run_in(stack, code, **specs):
    """Run `code` in envs/<stack>'s interpreter with each spec as the JSON text SPECS[name];
    return what it prints as JSON on its last line."""
    prelude = ("import json\nfrom dlbench.specs import spec_from_dict\n"
               f"SPECS = {{name: spec_from_dict(json.loads(text)) for name, text in {specs!r}.items()}}\n")
    proc = subprocess.run([venv_python(stack), "-c", prelude + textwrap.dedent(code)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_pytorch_picks_nccl_on_gpus_gloo_on_cpus_and_dataparallel_only_with_gpus():
    out = run_in("pytorch", """
    import torch
    import torch.distributed as dist
    from dlbench import machine, protocol
    from dlbench.errors import NotApplicable
    from dlbench.frameworks import pytorch as adapter

    # four GPUs on the machine and in torch: only the counts and the calls a GPU would answer are faked
    machine._command = lambda *args: "\\n".join(["NVIDIA H100, 550.54.15, 81559 MiB"] * 4)
    torch.cuda.device_count = lambda: 4
    torch.cuda.set_device = lambda device: None
    groups = []
    dist.init_process_group = lambda backend, **kwargs: groups.append((backend, kwargs["world_size"]))

    out = {"resolved": {}, "adapters": {}, "dp": {}}
    for kind, gpus in (("gpu", machine.gpus()), ("cpu", [])):
        ddp = SPECS["ddp"]
        device_kind = protocol.resolve_device("pytorch", "auto", adapter.visible_gpus(), len(gpus), ddp.devices)
        out["resolved"][kind] = device_kind
        placement = adapter.setup(ddp, device_kind, 1)
        out["adapters"][kind] = [*groups.pop(), str(placement.handles["device"])]
        try:
            adapter.check(SPECS["dp"], device_kind)
            out["dp"][kind] = "planned"
        except NotApplicable as reason:
            out["dp"][kind] = str(reason)
    print(json.dumps(out))
    """, ddp=spec_to_json(smoke_spec("mnist", "pytorch", devices=2, strategy="ddp")),
        dp=spec_to_json(smoke_spec("mnist", "pytorch", devices=2, strategy="dp")))
    assert out["resolved"] == {"gpu": "gpu", "cpu": "cpu"}
    assert out["adapters"] == {"gpu": ["nccl", 2, "cuda:1"], "cpu": ["gloo", 2, "cpu"]}
    assert out["dp"] == {"gpu": "planned", "cpu": "DataParallel runs on GPUs only; this run has none"}


# What each framework's adapter sets for cuDNN's autotuning on, and how its framework reads it back.
READ_BACK = {
    "pytorch": "import torch; value = torch.backends.cudnn.benchmark",
    "tensorflow": "import os; value = os.environ['TF_CUDNN_USE_AUTOTUNE']",
    "mxnet": "import os; value = os.environ['MXNET_CUDNN_AUTOTUNE_DEFAULT']",
    "jax": "import jax; jax.devices(); import os; value = os.environ['XLA_FLAGS']",  # XLA starts and accepts the flag
    "chainer": "import chainer; value = chainer.config.autotune",
}
ON = {"pytorch": True, "tensorflow": "1", "mxnet": "1", "jax": "--xla_gpu_autotune_level=4", "chainer": True}
ENGINE = {"keras-tensorflow": "tensorflow", "keras-jax": "jax", "keras-torch": "pytorch"}


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_each_backend_sets_the_cudnn_autotune_policy_before_its_framework_starts(framework):
    engine = ENGINE.get(framework, framework)
    out = run_in(framework, f"""
    import importlib, os
    from dlbench import numerics
    from dlbench.frameworks import adapter_module

    # a caller's environment that turned autotuning off: the policy wins
    os.environ.update(TF_CUDNN_USE_AUTOTUNE="0", MXNET_CUDNN_AUTOTUNE_DEFAULT="0",
                      XLA_FLAGS="--xla_gpu_autotune_level=0")
    adapter = importlib.import_module(adapter_module({framework!r}))
    adapter.configure(SPECS["one"])
    recorded = numerics.cudnn_autotune(adapter)
    {READ_BACK[engine]}
    print(json.dumps({{"recorded": recorded, "value": value}}))
    """, one=spec_to_json(smoke_spec("mnist", framework)))
    assert numerics.CUDNN_AUTOTUNE
    assert out["value"] == ON[engine]
    assert out["recorded"]["policy"] == "on"
    assert ON[engine] in out["recorded"]["settings"].values()
