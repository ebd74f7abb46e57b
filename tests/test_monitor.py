"""The harness samples a run's memory the same way for every framework (dlbench.monitor)."""
import importlib
import os
import subprocess
import sys
import time
import types

import psutil
import pytest

from dlbench import monitor
from dlbench.monitor import UtilisationSampler

MIB = 2**20
# A run that writes {} MiB (so resident), says so on stdout, then holds them until its stdin is
# closed: each test lets it end once what it tests has happened, not after a time
HOLD = "import sys; b = b'x' * ({} * 2**20); print(flush=True); sys.stdin.read()"


@pytest.fixture
def hold():
    """Starts HOLD runs (hold(mib)); kills any still running at the end."""
    started = []

    def start(mib=0):
        proc = subprocess.Popen([sys.executable, "-c", HOLD.format(mib)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()


def until(condition, what, timeout_s=30):
    """Wait until condition() holds, polled every 10 ms. The deadline is generous: it fails only
    where the event never happens, however slowly this machine runs."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.01)


def highest(sampler):
    """The highest PSS the sampler has read so far (0 if none), read while it runs."""
    return max(filter(None, list(sampler.samples["pss_bytes"])), default=0)


class WaitClock:
    """The sampler's clock (monitor.time.monotonic) and its halt event, where time passes only as the
    sampler waits: each wait returns at once, as if its timeout had passed; the wait that reaches
    `until_s` halts it. waits: (the sampler's time, the timeout) of each wait."""

    def __init__(self, until_s):
        self.now, self.until_s, self.waits = 0.0, until_s, []

    def monotonic(self):
        return self.now

    def wait(self, timeout):
        self.waits.append((self.now, timeout))
        self.now += timeout
        return self.now >= self.until_s

    def set(self):
        pass


def test_a_run_shorter_than_one_interval_is_sampled_from_its_start(monkeypatch):
    """A sample at once, then one every EARLY_INTERVAL_S through the first EARLY_S, then one every
    interval: a run shorter than the harness's 0.5 s interval has several samples. On the sampler's
    own clock, advanced by its waits (no machine's speed in it), over a process that lives throughout
    (this one)."""
    clock = WaitClock(until_s=2.0)
    monkeypatch.setattr(monitor, "time", clock)
    sampler = UtilisationSampler(os.getpid(), 0.5)
    sampler._halt = clock
    sampler.start()
    sampler.join(timeout=60)
    assert not sampler.is_alive(), "the sampler did not halt"
    samples = sampler.stop()
    assert samples["t_s"][0] == 0.0  # before any wait
    assert len(samples["t_s"]) == len(clock.waits)  # then one sample after each wait
    early = [timeout for now, timeout in clock.waits if now < monitor.EARLY_S]
    later = [timeout for now, timeout in clock.waits if now >= monitor.EARLY_S]
    assert early and set(early) == {monitor.EARLY_INTERVAL_S} and later and set(later) == {0.5}, clock.waits
    assert sum(t < 0.5 for t in samples["t_s"]) >= 5  # several within the harness's 0.5 s (10 at 50 ms)


def test_a_run_s_peak_is_sampled(hold):
    # 300 MiB, held until a sample has read them
    proc = hold(300)
    sampler = UtilisationSampler(proc.pid, 0.5)
    sampler.start()
    proc.stdout.readline()  # written
    until(lambda: highest(sampler) > 250 * MIB, "a sample of the run's 300 MiB")
    proc.stdin.close()
    proc.wait(timeout=30)
    samples = sampler.stop()
    assert samples["t_s"], "no sample taken"
    assert max(filter(None, samples["pss_bytes"])) > 250 * MIB
    assert samples["t_s"] == sorted(samples["t_s"])
    assert len(samples["t_s"]) == len(samples["pss_bytes"]) == len(samples["cpu_percent"])
    assert all(0 <= percent <= 100 for percent in samples["cpu_percent"])  # the machine's, all cores
    assert samples["interval_s"] == 0.5 and samples["cpu_count"] == psutil.cpu_count()


def test_the_pss_is_read_where_the_rss_sets_a_new_high_and_every_refresh(monkeypatch, hold):
    """Reading a process's PSS walks its pages (milliseconds of the kernel's time beside the run);
    its RSS is free. While the RSS holds, the PSS is read only every PSS_REFRESH_S: a refresh of a
    minute reads at most once more in the samples after the 200 MiB are written, one of 0.3 s
    several times (waited for: the run holds its memory until then)."""
    def held(sampler, written_s):
        """(readings, samples) of the PSS after the write (and 0.2 s more: the write's last pages)."""
        pss = [pss for t, pss in zip(list(sampler.samples["t_s"]), list(sampler.samples["pss_bytes"]))
               if t > written_s + 0.2]
        return sum(value is not None for value in pss), len(pss)

    readings = {}
    for refresh_s, enough in ((60.0, lambda reads, count: count >= 5), (0.3, lambda reads, count: reads >= 3)):
        monkeypatch.setattr(monitor, "PSS_REFRESH_S", refresh_s)
        proc = hold(200)
        sampler = UtilisationSampler(proc.pid, 0.1)
        started = time.monotonic()  # before the sampler's start: the samples' times are at most this late
        sampler.start()
        proc.stdout.readline()  # written
        written_s = time.monotonic() - started
        until(lambda: enough(*held(sampler, written_s)), f"enough samples of the held memory (refresh {refresh_s} s)")
        proc.stdin.close()
        proc.wait(timeout=30)
        samples = sampler.stop()
        assert max(filter(None, samples["pss_bytes"])) > 190 * MIB  # the peak is read
        readings[refresh_s] = held(sampler, written_s)
    (never, held_samples), (refreshed, _) = readings[60.0], readings[0.3]
    assert held_samples >= 5 and never <= 1, readings  # a last byte may still come in (the interpreter's exit)
    assert refreshed >= 3, readings


def test_a_tree_over_its_limit_is_killed_where_its_pss_is(hold):
    killed = []
    proc = hold(200)  # held until killed
    sampler = UtilisationSampler(proc.pid, 0.05, limit_bytes=100 * MIB, on_limit=lambda: killed.append(proc.kill()))
    sampler.start()
    proc.wait(timeout=60)  # a run the sampler never killed would hold on past this
    sampler.stop()
    assert killed and sampler.exceeded_bytes > 100 * MIB  # killed once over it, mid-write or after


def zombie(proc):
    """Wait until `proc` has ended but is not reaped (no wait() yet): a zombie, nothing readable."""
    until(lambda: psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE, "the process's end")


def test_an_ended_tree_adds_no_empty_sample(hold):
    # sampled alive, then a zombie until reaped, read by the sampler as one (its PSS reads 0)
    proc = hold()
    sampler = UtilisationSampler(proc.pid, 0.1)
    looks = []  # each reading of the tree's RSS (the sampler's every round, whether or not it samples)
    read_rss = sampler._rss
    sampler._rss = lambda tree: looks.append(len(tree)) or read_rss(tree)
    sampler.start()
    until(lambda: len(sampler.samples["t_s"]) >= 2, "two samples of the live process")
    proc.stdin.close()
    zombie(proc)
    seen = len(looks)
    until(lambda: len(looks) >= seen + 2 or not sampler.is_alive(), "the sampler's rounds over the zombie")
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


def test_nvml_sampling_fills_each_gpu_s_utilisation_and_memory_and_the_tree_s_gpu_memory(monitor_with, hold):
    proc = hold()  # until sampled
    # NVML lists the run's process and another's (not the run's: not counted); None, as NVML
    # gives under some drivers, counts nothing
    nvml = monitor_with(stub_pynvml({proc.pid: 5 << 30, 1: 7 << 30, 2: None}))
    assert nvml.GPUS == ["gpu0", "gpu1"]
    sampler = nvml.UtilisationSampler(proc.pid, 0.5)
    sampler.start()
    until(lambda: sampler.samples["t_s"], "a sample of the run")
    proc.stdin.close()
    proc.wait(timeout=30)
    samples = sampler.stop()
    assert samples["t_s"], "no sample taken"
    assert len(samples["gpu_percent"]) == len(samples["gpu_memory_bytes"]) == len(samples["t_s"])
    assert set(map(tuple, samples["gpu_percent"])) == {(35, 90)}
    assert set(map(tuple, samples["gpu_memory_bytes"])) == {(1 << 30, 3 << 30)}
    assert set(samples["gpu_process_bytes"]) == {5 << 30}


def test_without_nvml_no_gpu_is_sampled(monitor_with, hold):
    failing = types.SimpleNamespace(nvmlInit=lambda: (_ for _ in ()).throw(RuntimeError("NVML Shared Library Not Found")))
    cpu_only = monitor_with(failing)
    assert cpu_only.GPUS == []
    proc = hold()  # until sampled
    sampler = cpu_only.UtilisationSampler(proc.pid, 0.5)
    sampler.start()
    until(lambda: sampler.samples["t_s"], "a sample of the run")
    proc.stdin.close()
    proc.wait(timeout=30)
    samples = sampler.stop()
    assert samples["t_s"], "no sample taken"
    assert samples["gpu_percent"] == samples["gpu_memory_bytes"] == samples["gpu_process_bytes"] == []
