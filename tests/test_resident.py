"""tests/resident.py: the environments' shared libraries locked in memory while the slow tests run."""
import os
import time

import resident

MIB = 2 ** 20


def locked_kib(path):
    """The kibibytes of path's mappings in this process that the kernel holds locked (/proc/self/smaps)."""
    total, mapping = 0, None
    for line in open("/proc/self/smaps"):
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5:  # a mapping's header: its path, if any, last
            mapping = fields[-1] if len(fields) >= 6 else None
        elif fields[0] == "Locked:" and mapping == str(path):
            total += int(fields[1])
    return total


def library(path, mib):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(int(mib * MIB)))
    return path


def test_every_shared_library_is_locked_once_and_nothing_else(tmp_path):
    libs = tmp_path / "venv" / "lib"
    first, second = library(libs / "libfirst.so", 1), library(libs / "deep" / "_second.cpython-311.so.1", 0.5)
    linked = libs / "hardlinked.so"
    os.link(first, linked)  # the same file in another venv: counted once, mapped under either name
    library(libs / "module.py", 1)
    kept = resident.Resident(budget=10 * MIB)
    assert kept.lock_libraries(tmp_path / "venv") and kept.stopped is None
    assert kept.locked_bytes == 1.5 * MIB
    assert locked_kib(first) + locked_kib(linked) == 1024 and locked_kib(second) == 512  # the kernel's word
    assert locked_kib(libs / "module.py") == 0


def test_locking_stops_at_the_budget_and_says_why(tmp_path):
    library(tmp_path / "liba.so", 1)
    library(tmp_path / "libb.so", 1)
    kept = resident.Resident(budget=1.5 * MIB)
    assert not kept.lock_libraries(tmp_path)
    assert kept.locked_bytes == MIB and "is locked" in kept.stopped


def test_a_refused_lock_keeps_nothing_and_says_why(tmp_path):
    path = library(tmp_path / "liba.so", 1)

    class Refusing:  # the C library of a process without CAP_IPC_LOCK, past RLIMIT_MEMLOCK
        mmap, munmap = resident._libc.mmap, resident._libc.munmap

        @staticmethod
        def mlock(address, size):
            return -1

    kept = resident.Resident(budget=10 * MIB, libc=Refusing)
    assert not kept.lock_libraries(tmp_path)
    assert kept.locked_bytes == 0 and kept.stopped.startswith("mlock refused")
    assert locked_kib(path) == 0


def test_an_environment_is_locked_once_its_python_is_written(tmp_path):
    """The venv's `python` wrapper is written last (scripts/build_venv.py): before it, the venv is
    being built and its libraries are left for the next look."""
    prefix = tmp_path / "venvs"
    lib = library(prefix / "pytorch-0123" / "lib" / "libtorch.so", 1)
    kept = resident.keep_in_memory([], prefix, budget=10 * MIB, rescan_s=0.05)
    try:
        time.sleep(0.5)
        assert kept.locked_bytes == 0
        (prefix / "pytorch-0123" / "python").write_text("#!/bin/sh\n")
        deadline = time.monotonic() + 10
        while kept.locked_bytes == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert kept.locked_bytes == MIB and locked_kib(lib) == 1024
    finally:
        kept.done.set()


def test_the_first_worker_keeps_them_once_the_selection_holds_a_slow_test(monkeypatch):
    """tests/conftest.py: one process (the first pytest-xdist worker, or the only one) locks the
    libraries, and only for a selection with a slow test (`pytest -m "not slow"` starts no framework)."""
    import conftest

    started = []
    monkeypatch.setattr(resident, "keep_in_memory", lambda folders, prefix: started.append(prefix) or
                        resident.Resident(budget=0))

    class Item:
        def __init__(self, slow):
            self.slow = slow

        def get_closest_marker(self, name):
            return object() if name == "slow" and self.slow else None

    class Session:
        def __init__(self, *slow):
            self.items = [Item(s) for s in slow]

    for worker, selection, expected in [("gw0", (False, True), [conftest.VENV_PREFIX]), ("gw0", (False, False), []),
                                        ("gw1", (True,), []), (None, (True,), [conftest.VENV_PREFIX])]:
        monkeypatch.setattr(conftest, "KEPT", {})
        started.clear()
        if worker is None:
            monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        else:
            monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        conftest.pytest_collection_finish(Session(*selection))
        assert started == expected, (worker, selection)
        assert (conftest.kept_in_memory() is None) == (not expected)
    assert conftest.kept_in_memory() == "0.0 GiB of the environments' shared libraries kept in memory"
