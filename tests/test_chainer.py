"""The Chainer adapter (dlbench.frameworks.chainer) and its workload modules, run in the chainer
environment: its runs of the session's smoke run (its version, processes and BLAS), ChainerMN
over 2 MPI processes (mpiexec) against 1 process (the same global batches, in order, and the
same losses), a failing rank or a missing mpiexec stopping the launch with a message, the
parameter counts."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import smoke_records, venv_python
from dlbench.specs import spec_to_dict
from specs import smoke_spec

pytestmark = pytest.mark.slow

STEPS = 3  # steps of the batch-order probe

# A target for the adapter's launch, imported by name in every MPI rank (its folder is put on
# PYTHONPATH): the workload built as a run builds it, then the first STEPS batches of the run's
# order, this rank's slice of each: its indices, whether the batch holds those images, the loss.
PROBE = '''
import json
from pathlib import Path

import numpy as np

from dlbench.clock import run_order
from dlbench.protocol import adapter_of, workload_class
from dlbench.specs import spec_from_dict

STEPS = {steps}


def batch_order(rank, spec_dict, out_path, device_kind):
    spec = spec_from_dict(spec_dict)
    adapter = adapter_of(spec)
    placement = adapter.setup(spec, device_kind, rank)
    workload = workload_class(spec)(spec, placement, adapter)
    workload.build()
    order, epochs = run_order(workload.n_train, spec.global_batch, spec.seed, STEPS)
    local = placement.local(order)
    steps = []
    for indices, (images, labels) in zip(local, workload.batches(local, epochs)):
        steps.append({{"indices": indices.tolist(), "images": bool(np.array_equal(images, workload.train_images[indices])),
                      "loss": float(workload.train_step((images, labels)))}})
    Path(out_path).with_name(f"rank{{placement.rank}}.json").write_text(
        json.dumps({{"processes": placement.processes, "steps": steps}}))
    adapter.teardown(placement)


def fails(rank, spec_dict, out_path, device_kind):
    spec = spec_from_dict(spec_dict)
    adapter = adapter_of(spec)
    placement = adapter.setup(spec, device_kind, rank)
    if rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    adapter.barrier(placement)  # rank 0 waits for rank 1, until mpiexec ends the job
'''.format(steps=STEPS)


def launch(target, spec, tmp_path, workdir, env=None):
    """The chainer adapter's launch of probe.<target> for `spec`, in the chainer environment;
    the completed process."""
    (tmp_path / "probe.py").write_text(PROBE)
    out = tmp_path / "out" / "result.json"
    out.parent.mkdir(exist_ok=True)
    code = textwrap.dedent(f"""
        import json, probe
        from dlbench.frameworks import chainer as adapter
        from dlbench.specs import spec_from_dict
        spec_dict = json.loads({json.dumps(spec_to_dict(spec))!r})
        adapter.launch(spec_from_dict(spec_dict), probe.{target}, (spec_dict, {str(out)!r}, "cpu"))
        """)
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    return subprocess.run([venv_python("chainer"), "-c", code], cwd=workdir, capture_output=True, text=True,
                          env=env, check=False), out.parent


@pytest.mark.parametrize("run_set", ["mnist", "imdb", "chestxray", "chestxray-loader"])
def test_chainer_s_smoke_runs_record_its_version_processes_and_blas(run_set, smoke_run):
    """Chainer's runs of the session's smoke run (tests/test_workflow.py checks every framework's
    records, losses and start): ChainerMN's runs on 2 devices as 2 processes, and numpy's BLAS running
    the kernels envs/chainer.yaml names (OPENBLAS_CORETYPE), which the record says."""
    records = [r for r in smoke_records(smoke_run, run_set, "chainer") if r["status"] == "ok"]
    assert records
    if run_set == "mnist":
        assert {r["spec"]["strategy"] for r in records} == {"none", "chainermn"}
    for record in records:
        assert record["environment"]["framework_version"] == "7.8.1"
        assert record["threads"]["processes"] == record["spec"]["devices"]
        blas = record["environment"]["framework_cpu"]["blas"]
        assert [pool["architecture"] for pool in blas if pool["internal_api"] == "openblas"] == ["Haswell"]


def test_chainermn_on_two_processes_takes_the_global_batches_of_one_in_order(smoke_data, tmp_path):
    results = {}
    for processes, row in [(1, {"batch": 64}), (2, {"batch": 32, "devices": 2, "strategy": "chainermn"})]:
        folder = tmp_path / str(processes)
        folder.mkdir()
        proc, out = launch("batch_order", smoke_spec("mnist", "chainer", threads=2, **row), folder, smoke_data)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[processes] = [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(processes)]
    (one,), (first, second) = results[1], results[2]
    assert one["processes"] == 1 and first["processes"] == second["processes"] == 2
    for step, (whole, a, b) in enumerate(zip(one["steps"], first["steps"], second["steps"])):
        assert len(whole["indices"]) == 64 and len(a["indices"]) == len(b["indices"]) == 32
        assert a["indices"] + b["indices"] == whole["indices"], step  # rank 0 the first half, rank 1 the second
        assert whole["images"] and a["images"] and b["images"], step
        # each rank's loss is its half's mean; their mean is the global batch's, after the same updates
        assert abs((a["loss"] + b["loss"]) / 2 / whole["loss"] - 1) < 1e-5, (step, whole, a, b)
    assert len(one["steps"]) == STEPS


def test_a_failing_rank_stops_the_launch_naming_mpiexec_and_the_error(smoke_data, tmp_path):
    spec = smoke_spec("mnist", "chainer", batch=32, devices=2, strategy="chainermn")
    proc, _ = launch("fails", spec, tmp_path, smoke_data)
    assert proc.returncode != 0
    assert "FrameworkError" in proc.stderr and "mpiexec -n 2" in proc.stderr, proc.stderr[-3000:]
    # the failed rank's error in the launch's message, from its file: mpiexec's forwarding of the
    # ranks' output may end before the error reaches it
    message = proc.stderr[proc.stderr.rindex("FrameworkError: "):]
    errors = message.split("the failed ranks' errors:")[1].split("the end of their error output:")[0]
    assert "rank 1 fails on purpose" in errors and "chainermn rank 1 of 2 failed" in errors, message


def test_a_chainermn_launch_needs_no_mpi_of_the_system_s(smoke_data, tmp_path):
    """The env's own MPI (envs/chainer.yaml: the mpich wheel's mpiexec and libmpi): a PATH with no
    MPI on it launches the ranks all the same."""
    spec = smoke_spec("mnist", "chainer", batch=32, devices=2, strategy="chainermn")
    proc, _ = launch("batch_order", spec, tmp_path, smoke_data, env={"PATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_without_mpiexec_a_chainermn_launch_says_where_it_looked(tmp_path, monkeypatch):
    from dlbench.errors import FrameworkError
    from dlbench.frameworks.chainer import mpiexec

    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FrameworkError, match=rf"mpiexec, which is neither in {tmp_path / 'bin'} nor on PATH"):
        mpiexec()


def test_parameter_counts(tmp_path):
    specs = {"small": smoke_spec("mnist", "chainer"), "large": smoke_spec("mnist", "chainer", model="large"),
             "imdb": smoke_spec("imdb", "chainer"), "densenet": smoke_spec("chestxray", "chainer")}
    code = textwrap.dedent(f"""
        import json
        from dlbench.parity import model_for
        from dlbench.specs import spec_from_dict
        specs = json.loads({json.dumps({name: spec_to_dict(spec) for name, spec in specs.items()})!r})
        print(json.dumps({{name: model_for(spec_from_dict(s)).parameter_count() for name, s in specs.items()}}))
        """)
    proc = subprocess.run([venv_python("chainer"), "-c", code], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # NStepLSTM has two bias vectors per gate, as PyTorch's LSTM
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"small": 402_442, "large": 4_104_202,
                                                                "imdb": 772_354, "densenet": 417_102}  # DenseNet-21
