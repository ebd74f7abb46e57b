"""The shared libraries of the environments the slow tests start, kept in memory while they run.

A machine may page out file pages that nobody touched for a while: this one's VM does (DAMON's
pageout of pages idle for 60 s, up to 128 MiB a second), so a framework that starts a minute after
its last start reads its libraries back from disk, page by page: TensorFlow's import took 15.7 s
(274 major faults) against 3.2 s right after (59), and 3.3 s (10) with its libraries locked, 100 s
after its last start. Locked pages (mlock) are never paged out. Each environment's shared
libraries (2.9 GiB for the twelve, and the driver's 0.2 GiB) are mapped and locked once the
environment is complete (its `python` wrapper, written last), within a third of the memory
available, until the process ends. Where the lock is refused (no CAP_IPC_LOCK beyond
RLIMIT_MEMLOCK), nothing is kept and the tests run as before; the terminal summary says which.
A run's memory (PSS, dlbench.monitor) in the tests counts less of its libraries' pages, which it
shares with the locking process: the tests assert relations (a larger batch needs more, a search's
answer fits next to a batch that does not) and a 64 MiB limit far below any run, no figure this moves.
"""
import ctypes
import ctypes.util
import mmap
import os
import re
import threading
from pathlib import Path

SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$")

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


def available_bytes():
    """The memory the kernel could give without swapping (/proc/meminfo's MemAvailable)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


class Resident:
    """Shared libraries mapped and locked in this process, up to `budget` bytes; `stopped` says
    why locking stopped, if it did (a refusal or the budget), after which nothing more is locked.
    `libc`: the C library whose mmap and mlock it calls."""

    def __init__(self, budget, libc=_libc):
        self.budget, self.libc = budget, libc
        self.locked = {}  # (device, inode): bytes; a library hard-linked into several venvs counts once
        self.stopped = None
        self.done = threading.Event()  # set: keep_in_memory's thread looks for no more environments

    @property
    def locked_bytes(self):
        return sum(self.locked.values())

    def lock(self, path):
        """Map and lock one file; False (and `stopped` set) where that could not be done."""
        stat = path.stat()
        size, key = stat.st_size, (stat.st_dev, stat.st_ino)
        if key in self.locked or size == 0:
            return True
        if self.locked_bytes + size > self.budget:
            self.stopped = f"a third of the memory available ({self.budget / 2 ** 30:.1f} GiB) is locked"
            return False
        fd = os.open(path, os.O_RDONLY)
        try:
            address = self.libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        finally:
            os.close(fd)  # the mapping keeps the file
        if address in (None, MAP_FAILED):
            self.stopped = f"mmap of {path} failed: {os.strerror(ctypes.get_errno())}"
            return False
        if self.libc.mlock(address, size) != 0:
            self.stopped = f"mlock refused: {os.strerror(ctypes.get_errno())}"
            self.libc.munmap(address, size)
            return False
        self.locked[key] = size
        return True

    def lock_libraries(self, folder):
        """Lock every shared library under folder; False once locking stopped."""
        for directory, _, names in os.walk(folder):
            for name in names:
                path = Path(directory) / name
                if SHARED_LIBRARY.search(name) and path.is_file() and not self.lock(path):
                    return False
        return True


def keep_in_memory(folders, venv_prefix, budget=None, rescan_s=30):
    """A Resident whose daemon thread locks the shared libraries under `folders`, then those of each
    environment under venv_prefix as soon as it is complete, looking again every `rescan_s` seconds
    (on a fresh machine the smoke run builds them), until its `done` is set."""
    resident = Resident(available_bytes() // 3 if budget is None else budget)

    def keep():
        complete = set()
        if not all(resident.lock_libraries(folder) for folder in folders):
            return
        while True:
            venvs = sorted(venv_prefix.iterdir()) if venv_prefix.is_dir() else []
            for venv in venvs:
                if venv not in complete and (venv / "python").exists():
                    complete.add(venv)
                    if not resident.lock_libraries(venv):
                        return
            if resident.done.wait(rescan_s):
                return

    threading.Thread(target=keep, name="resident-libraries", daemon=True).start()
    return resident
