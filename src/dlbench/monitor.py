"""Utilisation over time: the machine's CPU, the run's memory and, where there are GPUs, theirs."""
import threading
import time

import psutil

try:  # NVML, where the environment has it and the machine has GPUs
    import pynvml

    pynvml.nvmlInit()
    GPUS = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
except Exception:  # no package, no driver or no GPU: CPU only
    GPUS = []


def gpu_memory_of(pids):
    """GPU memory (bytes, summed over the GPUs) that NVML says the processes `pids` use."""
    total = 0
    for gpu in GPUS:
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(gpu):
            if proc.pid in pids and proc.usedGpuMemory:
                total += proc.usedGpuMemory
    return total


EARLY_S, EARLY_INTERVAL_S = 1.0, 0.05  # the first second, sampled every 50 ms
# PSS is read from the kernel's smaps_rollup, which walks every page of the process: 18 ms of CPU
# for a TensorFlow trainer of 550 MiB (RSS from statm: 0.02 ms), taken beside the timed run every
# interval. A tree's PSS rises above its last reading only where its RSS does (new pages), or where
# a process outside the tree that shared its pages ended: read where the RSS sets a new high, and
# at least every PSS_REFRESH_S.
PSS_REFRESH_S = 5.0


class UtilisationSampler(threading.Thread):
    """Samples every `interval_s` until stopped: machine CPU %, memory (PSS) of the process tree of
    `pid`, per GPU its utilisation % and memory in use, and the GPU memory of the tree's
    processes (the same measure for every framework). With `limit_bytes`, a tree whose PSS
    exceeds it is killed (`on_limit`) and `exceeded_bytes` says what it reached: a memory limit
    as a device's memory is one, which a run on this machine does not otherwise have. PSS, not
    RSS: summed RSS counts the pages that forked loader workers share with the trainer (the
    framework's libraries) once per process, and stopped PyTorch's DenseNet-121 at batch 3 under
    2,048 MiB while its trainer's own peak at batch 2 was 713 MiB.

    The PSS is read where the tree's RSS reaches a new high (as it grows, every sample), at
    least every PSS_REFRESH_S, and under a limit wherever the RSS is over it (PSS <= RSS: under
    it, so is the PSS): a sample without a reading has pss_bytes None."""

    def __init__(self, pid, interval_s, limit_bytes=None, on_limit=None):
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.interval_s = interval_s
        self.limit_bytes, self.on_limit, self.exceeded_bytes = limit_bytes, on_limit, None
        self.samples = {"t_s": [], "cpu_percent": [], "pss_bytes": [], "gpu_percent": [], "gpu_memory_bytes": [],
                        "gpu_process_bytes": []}
        self._halt = threading.Event()

    def _tree(self):
        return [self.process, *self.process.children(recursive=True)]

    @staticmethod
    def _summed(tree, read):
        """read(process) summed over the tree's processes (one that ended between listing and
        reading counts nothing)."""
        total = 0
        for proc in tree:
            try:
                total += read(proc)
            except psutil.Error:
                pass
        return total

    def _rss(self, tree):
        """Resident memory of the tree: the processes' RSS summed (pages shared between them
        counted in each), an upper bound of its PSS."""
        return self._summed(tree, lambda proc: proc.memory_info().rss)

    def _pss(self, tree):
        """Memory of the tree: the sum of the processes' PSS, which splits the pages that
        processes share (forked loader workers, data-parallel ranks) between them, so that
        shared pages count once."""
        return self._summed(tree, lambda proc: proc.memory_full_info().pss)

    def run(self):
        start = time.monotonic()
        psutil.cpu_percent(interval=None)  # the first reading only sets the baseline
        highest_rss, pss_read_at = 0, -PSS_REFRESH_S
        while True:
            elapsed = time.monotonic() - start
            try:
                tree = self._tree()
                rss = self._rss(tree)
            except psutil.Error:  # the run has ended
                break
            pss = None
            over = self.limit_bytes and rss > self.limit_bytes
            if rss and (over or rss > highest_rss or elapsed - pss_read_at >= PSS_REFRESH_S):
                pss, pss_read_at = self._pss(tree), elapsed
            highest_rss = max(highest_rss, rss)
            if self.limit_bytes and pss and pss > self.limit_bytes:
                self.exceeded_bytes = pss
                self.on_limit()
                break
            if rss:  # nothing readable: the tree is ending (zombies have no memory to read)
                self.samples["t_s"].append(round(elapsed, 3))
                self.samples["cpu_percent"].append(psutil.cpu_percent(interval=None))
                self.samples["pss_bytes"].append(pss or None)
                if GPUS:
                    self.samples["gpu_percent"].append([pynvml.nvmlDeviceGetUtilizationRates(g).gpu for g in GPUS])
                    self.samples["gpu_memory_bytes"].append([pynvml.nvmlDeviceGetMemoryInfo(g).used for g in GPUS])
                    self.samples["gpu_process_bytes"].append(gpu_memory_of({p.pid for p in tree}))
            # densely at first, so that a run shorter than one interval still has its peak sampled
            if self._halt.wait(EARLY_INTERVAL_S if elapsed < EARLY_S else self.interval_s):
                break

    def stop(self):
        self._halt.set()
        self.join(timeout=5)
        return {"interval_s": self.interval_s, "cpu_count": psutil.cpu_count(), **self.samples}
