"""What the machine was doing while a unit was timed: CPU time stolen from it (by the
hypervisor), CPU time used by processes outside the run, and the CPUs the run may use.

A slow unit with steal or other processes' CPU beside it is the machine, not the framework.
Read before and after each timed unit, outside the clock:

    meter = CpuMeter()            # the calling process and everything it starts
    before = meter.read()
    ...                           # the timed unit
    usage = meter.usage(before, meter.read())
"""
import os

import psutil


def allowed_cpus():
    """How many CPUs this process may run on (its affinity; cgroup quotas are not seen)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count()


class CpuMeter:
    """CPU seconds of the machine and of one process tree (the run)."""

    def __init__(self, pid=None):
        self.root = psutil.Process(pid or os.getpid())

    @classmethod
    def of_group(cls):
        """The tree of this process group's leader (a run's trainer leads the group of all its
        processes), or of this process where the leader is not there."""
        try:
            return cls(os.getpgid(0))
        except psutil.Error:
            return cls()

    def _run_seconds(self):
        """user + system seconds of the run's processes: the root, its live descendants, and the
        children it has already waited for."""
        total = 0.0
        times = self.root.cpu_times()
        total += times.user + times.system + times.children_user + times.children_system
        for child in self.root.children(recursive=True):
            try:
                times = child.cpu_times()
            except psutil.Error:  # ended between listing and reading
                continue
            total += times.user + times.system
        return total

    def read(self):
        machine = psutil.cpu_times()
        busy = machine.user + machine.nice + machine.system + machine.irq + machine.softirq
        return {"busy": busy, "steal": getattr(machine, "steal", 0.0), "run": self._run_seconds()}

    @staticmethod
    def usage(before, after):
        """{steal_s, other_cpu_s, run_cpu_s, cpus} between two readings: CPU seconds stolen
        from the machine, used by processes outside the run, and used by the run."""
        run = after["run"] - before["run"]
        busy = after["busy"] - before["busy"]
        return {"steal_s": after["steal"] - before["steal"], "other_cpu_s": max(0.0, busy - run),
                "run_cpu_s": run, "cpus": allowed_cpus()}
