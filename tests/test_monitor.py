"""The harness samples a run's memory the same way for every framework (dlbench.monitor)."""
import subprocess
import sys

from dlbench.monitor import UtilisationSampler

MIB = 2**20


def test_a_run_shorter_than_one_interval_has_its_peak_sampled():
    # 300 MiB written (so resident), held 0.3 s: less than the harness's 0.5 s interval
    proc = subprocess.Popen([sys.executable, "-c", "import time; b = b'x' * (300 * 2**20); time.sleep(0.3)"])
    sampler = UtilisationSampler(proc.pid, 0.5)
    sampler.start()
    proc.wait()
    samples = sampler.stop()
    assert max(samples["pss_bytes"]) > 250 * MIB
    assert samples["t_s"] == sorted(samples["t_s"]) and len(samples["t_s"]) == len(samples["pss_bytes"])


def test_an_ended_tree_adds_no_empty_sample():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    sampler = UtilisationSampler(proc.pid, 0.5)
    sampler.start()
    proc.wait()
    sampler.join(timeout=2)  # a zombie until reaped: nothing readable, so no sample of 0
    samples = sampler.stop()
    assert 0 not in samples["pss_bytes"]
