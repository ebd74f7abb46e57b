"""What the machine was doing while a unit was timed: CPU time stolen from it (by the
hypervisor), CPU time used by processes outside the run, the CPUs the run may use, and the
run's minor page faults (a path that returns memory to the system and faults it back in,
e.g. glibc's trim threshold lowered, shows there).

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

    def _run_totals(self):
        """(user + system seconds, minor page faults) of the run's processes: the root, its live
        descendants, and the children it has already waited for."""
        seconds, faults = 0.0, 0
        for process in [self.root, *self.root.children(recursive=True)]:
            try:
                times = process.cpu_times()
            except psutil.Error:  # ended between listing and reading
                continue
            seconds += times.user + times.system
            faults += minor_faults(process.pid, with_children=process is self.root)
            if process is self.root:
                seconds += times.children_user + times.children_system
        return seconds, faults

    def read(self):
        machine = psutil.cpu_times()
        busy = machine.user + machine.nice + machine.system + machine.irq + machine.softirq
        run, faults = self._run_totals()
        return {"busy": busy, "steal": getattr(machine, "steal", 0.0), "run": run, "faults": faults}

    @staticmethod
    def usage(before, after):
        """{steal_s, other_cpu_s, run_cpu_s, minor_faults, cpus} between two readings: CPU seconds
        stolen from the machine, used by processes outside the run, and used by the run; the
        run's minor page faults."""
        run = after["run"] - before["run"]
        busy = after["busy"] - before["busy"]
        return {"steal_s": after["steal"] - before["steal"], "other_cpu_s": max(0.0, busy - run),
                "run_cpu_s": run, "minor_faults": max(0, after["faults"] - before["faults"]), "cpus": allowed_cpus()}


def minor_faults(pid, with_children=False):
    """Minor page faults of a process (and of its children it has waited for): /proc/PID/stat's
    minflt and cminflt; 0 where there is no /proc or the process has ended."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    # after the command's closing parenthesis: state is field 3, minflt 10, cminflt 11
    return int(fields[7]) + (int(fields[8]) if with_children else 0)


