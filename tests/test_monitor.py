"""The harness samples a run's memory the same way for every framework (dlbench.monitor)."""
import importlib
import subprocess
import sys
import time
import types

import psutil
import pytest

from dlbench import monitor
from dlbench.monitor import UtilisationSampler

MIB = 2**20


def test_a_run_shorter_than_one_interval_has_its_peak_sampled():
    # 300 MiB written (so resident), held 0.3 s: less than the harness's 0.5 s interval
    proc = subprocess.Popen([sys.executable, "-c", "import time; b = b'x' * (300 * 2**20); time.sleep(0.3)"])
    sampler = UtilisationSampler(proc.pid, 0.5)
    sampler.start()
    proc.wait()
    samples = sampler.stop()
    assert samples["t_s"], "no sample taken"
    assert max(filter(None, samples["pss_bytes"])) > 250 * MIB
    assert samples["t_s"] == sorted(samples["t_s"]) and samples["t_s"][-1] < 5
    assert len(samples["t_s"]) == len(samples["pss_bytes"]) == len(samples["cpu_percent"])
    assert all(0 <= percent <= 100 for percent in samples["cpu_percent"])  # the machine's, all cores
    assert samples["interval_s"] == 0.5 and samples["cpu_count"] == psutil.cpu_count()


# 200 MiB written (so resident) in one step, then held: the tree's RSS sets no new high after it
HOLD = "import time; b = b'x' * (200 * 2**20); print(flush=True); time.sleep({})"


def test_the_pss_is_read_where_the_rss_sets_a_new_high_and_every_refresh(monkeypatch):
    """Reading a process's PSS walks its pages (milliseconds of the kernel's time beside the run);
    its RSS is free. While the RSS holds, the PSS is read only every PSS_REFRESH_S."""
    readings = {}
    for refresh_s in (60.0, 0.3):
        monkeypatch.setattr(monitor, "PSS_REFRESH_S", refresh_s)
        proc = subprocess.Popen([sys.executable, "-c", HOLD.format(1.5)], stdout=subprocess.PIPE)
        sampler = UtilisationSampler(proc.pid, 0.1)
        started = time.monotonic()
        sampler.start()
        proc.stdout.readline()  # written
        written_s = time.monotonic() - started
        proc.wait()
        samples = sampler.stop()
        assert max(filter(None, samples["pss_bytes"])) > 190 * MIB  # the peak is read
        held = [pss for t, pss in zip(samples["t_s"], samples["pss_bytes"]) if t > written_s + 0.2]
        readings[refresh_s] = sum(pss is not None for pss in held), len(held)
    (never, held), (refreshed, _) = readings[60.0], readings[0.3]
    assert held >= 5 and never <= 1, readings  # a last byte may still come in (the interpreter's exit)
    assert refreshed >= 2, readings


def test_a_tree_over_its_limit_is_killed_where_its_pss_is(monkeypatch):
    killed = []
    proc = subprocess.Popen([sys.executable, "-c", HOLD.format(5)], stdout=subprocess.PIPE)
    sampler = UtilisationSampler(proc.pid, 0.05, limit_bytes=100 * MIB, on_limit=lambda: killed.append(proc.kill()))
    sampler.start()
    proc.wait(timeout=10)
    sampler.stop()
    assert killed and sampler.exceeded_bytes > 100 * MIB  # killed once over it, mid-write or after


def zombie(proc, timeout_s=10):
    """Wait until `proc` has ended but is not reaped (no wait() yet): a zombie, nothing readable."""
    deadline = time.monotonic() + timeout_s
    while psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the process did not end"
        time.sleep(0.01)


def test_an_ended_tree_adds_no_empty_sample():
    # alive for 0.5 s, then a zombie until reaped: sampled every 0.1 s at most (every 50 ms in the
    # first second), so several times alive and several times as a zombie, however slow the start
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    sampler = UtilisationSampler(proc.pid, 0.1)
    sampler.start()
    zombie(proc)
    time.sleep(0.5)  # nothing readable from a zombie (its PSS reads 0): no sample
    proc.wait()
    samples = sampler.stop()
    assert samples["t_s"], "no sample taken while the process lived"
    # every sample is the live process's, none the zombie's empty 0 (None: its PSS was not read)
    assert samples["pss_bytes"][0] and 0 not in samples["pss_bytes"], samples["pss_bytes"]
    assert len(samples["t_s"]) == len(samples["cpu_percent"]) and samples["t_s"] == sorted(samples["t_s"])


# NVML, as on a machine with GPUs (none here): the real sampler on a stub of pynvml's calls
def stub_pynvml(processes):
    """A module with pynvml's call shapes: two GPUs, `processes` ({pid: bytes}) on the second."""
    def handle(index):
        return f"gpu{index}"

    def utilisation(gpu):
        return types.SimpleNamespace(gpu={"gpu0": 35, "gpu1": 90}[gpu], memory=0)

    def memory(gpu):
        return types.SimpleNamespace(used={"gpu0": 1 << 30, "gpu1": 3 << 30}[gpu], total=80 << 30, free=0)

    def running(gpu):
        if gpu == "gpu0":
            return []
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes.items()]

    return types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 2,
                                 nvmlDeviceGetHandleByIndex=handle, nvmlDeviceGetUtilizationRates=utilisation,
                                 nvmlDeviceGetMemoryInfo=memory, nvmlDeviceGetComputeRunningProcesses=running)


@pytest.fixture
def monitor_with(monkeypatch):
    """dlbench.monitor imported again with a stub pynvml (its import-time setup runs on it);
    imported again without it afterwards."""
    def load(stub):
        monkeypatch.setitem(sys.modules, "pynvml", stub)
        return importlib.reload(monitor)

    yield load
    monkeypatch.undo()
    importlib.reload(monitor)


def test_nvml_sampling_fills_each_gpu_s_utilisation_and_memory_and_the_tree_s_gpu_memory(monitor_with):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.4)"])
    # NVML lists the run's process and another's (not the run's: not counted); None, as NVML
    # gives under some drivers, counts nothing
    nvml = monitor_with(stub_pynvml({proc.pid: 5 << 30, 1: 7 << 30, 2: None}))
    assert nvml.GPUS == ["gpu0", "gpu1"]
    sampler = nvml.UtilisationSampler(proc.pid, 0.5)
    sampler.start()
    proc.wait()
    samples = sampler.stop()
    assert samples["t_s"], "no sample taken"
    assert len(samples["gpu_percent"]) == len(samples["gpu_memory_bytes"]) == len(samples["t_s"])
    assert set(map(tuple, samples["gpu_percent"])) == {(35, 90)}
    assert set(map(tuple, samples["gpu_memory_bytes"])) == {(1 << 30, 3 << 30)}
    assert set(samples["gpu_process_bytes"]) == {5 << 30}


def test_without_nvml_no_gpu_is_sampled(monitor_with):
    failing = types.SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(RuntimeError("NVML Shared Library Not Found")))
    cpu_only = monitor_with(failing)
    assert cpu_only.GPUS == []
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    sampler = cpu_only.UtilisationSampler(proc.pid, 0.5)
    sampler.start()
    proc.wait()
    samples = sampler.stop()
    assert samples["t_s"], "no sample taken"
    assert samples["gpu_percent"] == samples["gpu_memory_bytes"] == samples["gpu_process_bytes"] == []
