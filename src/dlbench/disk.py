"""Room on disk, and jobs that failed for want of it (or of memory, or of a permission).

Three parts, no Snakemake in them (rules/lifecycle.smk hands them the jobs):

- The scripts that write tables run their main through `run_main`, and write each file through
  `partial`: a write that fails with ENOSPC (or EDQUOT, EACCES, EPERM, EROFS, ENOMEM, or a
  MemoryError) removes the file it cut short, which makes room for one line in the job's log,
  `dlbench failed: no space left on device: <path>; its file system (<mount>) has N KiB free`, and
  exits with the error's number (28 for ENOSPC) instead of a traceback that a full disk would swallow.
- At the end of an invocation, `failed_job_lines` says why each job that Snakemake saw fail failed,
  from the end of its log: that line, or an OSError's or MemoryError's own words (pip's, a
  traceback's). A job whose log is empty or missing (the disk was full before it wrote a byte:
  Snakemake itself may fail to write there) on a file system with less than MIN_ROOM free, or less
  than its outputs take, is said to have failed "probably for want of space"; one whose log names
  no cause while the kernel's OOM killer ended processes, "possibly out of memory". A line names
  the path and its file system's free space.
- Before the first job, `room_warning` compares the room on the results' file system with what the
  jobs to run are planned to add there (`planned_bytes`): each planned file that is not there yet,
  as large as the mean of the files of its kind under results/ now (records, logs, tables, figures,
  prepared data: its top folder and suffix), else as a typical one of a default run (TYPICAL); a
  file written again replaces one of about its size and adds nothing.
"""
import errno
import os
import re
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.files import log_tail
from dlbench.processes import oom_kills

# errno -> (what the line says, the errno's name)
CAUSES = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOMEM: "out of memory",
}
SPACE = ("no space left on device", "disk quota exceeded")
MARKER = "dlbench failed: "
# What the tools' own error text says, each to its cause (the last one found in a log wins: the
# error that ended the job is at its end)
PATTERNS = [
    (re.compile(r"No space left on device|\[Errno 28\]|\bENOSPC\b"), "no space left on device"),
    (re.compile(r"Disk quota exceeded|\[Errno 122\]|\bEDQUOT\b"), "disk quota exceeded"),
    (re.compile(r"Permission denied|\[Errno 13\]|\bEACCES\b"), "permission denied"),
    (re.compile(r"Read-only file system|\[Errno 30\]|\bEROFS\b"), "read-only file system"),
    (re.compile(r"\bMemoryError\b|Cannot allocate memory|\[Errno 12\]|\bENOMEM\b|out of memory|OutOfMemory"),
     "out of memory"),
]
QUOTED_PATH = re.compile(r"""\[Errno \d+\] [^:'"]+: ['"]([^'"]+)['"]""")
TAIL = 64 * 1024  # the bytes of a log read from its end
LAST_LINES = 20   # its lines searched for an error's words: the error that ended the job is at the end
MIN_ROOM = 1 << 20  # below this much free, an empty log of a failed job is said to be want of space

# Typical sizes of what a job writes under results/, in bytes, where no file of the kind is there
# yet (a default run, docs/default-run.md): a run record is 1-21 KiB (median 12), its log 1-3 KiB.
TYPICAL = {
    ("runs", ".json"): 12 << 10,
    ("logs", ".log"): 2 << 10,
    ("benchmarks", ".tsv"): 150,
    ("tables", ".csv"): 20 << 10,
    ("figures", ".png"): 60 << 10,
    ("figures", ".svg"): 60 << 10,
    ("figures", ".pdf"): 40 << 10,
}


def size_words(n):
    """Bytes in words: 512 bytes, 64 KiB, 3.2 MiB, 1.5 GiB."""
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if n >= 10 else f"{n:.1f} {unit}"


def existing(path):
    """The path itself, or its nearest folder that exists (a file not yet written)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path):
    """The bytes an unprivileged process may still write on the file system that holds `path`."""
    st = os.statvfs(existing(path))
    return st.f_bavail * st.f_frsize


def mount_point(path):
    """The mount point of the file system that holds `path`."""
    path = Path(os.path.realpath(existing(path)))
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def device(path):
    return os.stat(existing(path)).st_dev


def room_words(path):
    """'<mount point> has N KiB free' for the file system of `path`."""
    try:
        return f"its file system ({mount_point(path)}) has {size_words(free_bytes(path))} free"
    except OSError as err:
        return f"its file system's free space is unknown ({err.strerror})"


# ---- the scripts: say why, on the disk that is full

@contextmanager
def partial(path, name=None):
    """Write `path` in full or not at all: a write that fails removes what it cut short (which makes
    room for the log's line on a full disk) and names the file (`name`, else `path`) in the error
    (a failed write, not open, names none; `name` is the file that `path` becomes)."""
    try:
        yield path
    except OSError as err:
        Path(path).unlink(missing_ok=True)
        if err.filename in (None, str(path)):
            err.filename = str(name or path)
        raise


def cause_line(err):
    """The log's line for an error that `run_main` explains; None for any other."""
    if isinstance(err, MemoryError):
        return f"{MARKER}out of memory (MemoryError)"
    if not isinstance(err, OSError) or err.errno not in CAUSES:
        return None
    cause = CAUSES[err.errno]
    if err.filename is None:
        return f"{MARKER}{cause} ({errno.errorcode[err.errno]})"
    where = f"{MARKER}{cause}: {err.filename}"
    return f"{where}; {room_words(err.filename)}" if cause in SPACE else where


def run_main(main):
    """Run a script's main; a failure for want of space, memory or a permission ends it with one
    line that says so (MARKER) and the error's number as its exit status, not a traceback."""
    try:
        return main()
    except (OSError, MemoryError) as err:
        line = cause_line(err)
        if line is None:
            raise
        try:
            print(line, file=sys.stderr, flush=True)
        except OSError:
            pass  # nowhere to write it: the end line reads the file system instead (failed_job_lines)
        sys.exit(getattr(err, "errno", None) or errno.ENOMEM)


# ---- the end line: why the failed jobs failed

@dataclass(frozen=True)
class FailedJob:
    name: str                        # the rule and its wildcards: "aggregate run_set=mnist"
    logs: tuple = ()
    outputs: tuple = ()


def job_view(job):
    """A Snakemake job (its rule, wildcards, logs and outputs) as a FailedJob."""
    wildcards = " ".join(f"{key}={value}" for key, value in job.wildcards.items())
    return FailedJob(f"{job.rule.name} {wildcards}".strip(), tuple(map(str, job.log)), tuple(map(str, job.output)))


def cause_in(text):
    """(cause, path or None) from a log's text: run_main's line, else the last error it names."""
    for line in reversed(text.splitlines()):
        if line.startswith(MARKER):
            said = line[len(MARKER):]
            cause, _, rest = said.partition(": ")
            return cause.split(" (")[0], (rest.split("; ")[0] or None) if rest else None
    found = None
    for line in [line for line in text.splitlines() if line.strip()][-LAST_LINES:]:
        for pattern, cause in PATTERNS:
            if pattern.search(line):
                quoted = QUOTED_PATH.search(line)
                found = (cause, quoted.group(1) if quoted else None)
                break
    return found


def failed_job_line(job, oom=0, stopped=None):
    """One line for a job Snakemake saw fail: why, where and how much room there is, with its log
    (`oom`: the processes the kernel's OOM killer ended while the invocation ran; `stopped`: the
    signal that stopped the invocation, which ended the jobs that ran)."""
    logs = list(job.logs)
    log_words = f"log: {', '.join(logs)}" if logs else "no log"
    found = None
    for log in logs:
        found = cause_in(log_tail(log, TAIL)) or found
    where = next(iter(job.outputs), None) or next(iter(logs), None)
    if found:
        cause, path = found
        path = path or where
        if cause in SPACE:
            return f"  failed, {cause}: {job.name}: {path}; {room_words(path)} ({log_words})"
        return f"  failed, {cause}: {job.name}{': ' + path if path and cause != 'out of memory' else ''} ({log_words})"
    silent = all(not Path(log).exists() or Path(log).stat().st_size == 0 for log in logs)
    if silent and where is not None:
        try:
            room = free_bytes(where)
        except OSError:
            room = None
        took = sum(Path(out).stat().st_size for out in job.outputs if Path(out).is_file())
        if room is not None and room < max(MIN_ROOM, took):
            said = "its log is empty" if any(Path(log).exists() for log in logs) else "it left no log"
            return (f"  failed, probably for want of space ({said}): {job.name}: {where}; {room_words(where)}"
                    f" ({log_words})")
    if stopped:
        return f"  stopped: {job.name} ({log_words})"
    if oom:
        return (f"  failed, possibly out of memory (the kernel's OOM killer ended {oom} process(es) while this "
                f"invocation ran): {job.name} ({log_words})")
    return f"  failed: {job.name} ({log_words})"


def failed_job_lines(jobs, oom_kills_before=None, stopped=None):
    """The end line's lines for the jobs Snakemake saw fail (FailedJob, or Snakemake jobs), by name:
    `dlbench jobs: N failed`, then a line for each; none where none failed. `oom_kills_before`: the
    kernel's count of OOM kills when the invocation started (dlbench.processes.oom_kills);
    `stopped`: the signal that stopped the invocation (SIGTERM, SIGINT), whose jobs it ended."""
    views = [job if isinstance(job, FailedJob) else job_view(job) for job in jobs]
    if not views:
        return []
    now = oom_kills()
    oom = now - oom_kills_before if now is not None and oom_kills_before is not None else 0
    views.sort(key=lambda job: job.name)
    head = f"dlbench jobs: {len(views)} failed" + (f" or stopped ({stopped})" if stopped else "")
    return [head] + [failed_job_line(job, oom, stopped) for job in views]


# ---- before the first job: is there room for what it will write?

def kind(relative):
    """What kind of file a path under results/ is: its top folder and its suffix."""
    parts = Path(relative).parts
    return (parts[0] if len(parts) > 1 else "", Path(relative).suffix)


@dataclass
class Planned:
    bytes: int = 0
    files: int = 0
    unknown: list = field(default_factory=list)  # planned files of no known size (data, wheels)

    def words(self):
        estimate = f"about {size_words(self.bytes)} in {self.files} files"
        if self.unknown:
            estimate = (f"at least {size_words(self.bytes)} in {self.files} files, "
                        f"and {len(self.unknown)} of unknown size")
        return estimate


def sizes_by_kind(results):
    """{kind: [sizes]} of the files under results/ now."""
    found = {}
    for folder, _, names in os.walk(results):
        for name in names:
            path = os.path.join(folder, name)
            try:
                size = os.lstat(path).st_size
            except OSError:
                continue
            found.setdefault(kind(os.path.relpath(path, results)), []).append(size)
    return found


def planned_bytes(paths, results="results"):
    """What writing `paths` (the planned jobs' outputs, logs and benchmark files) will add on the
    file system of `results`: each file not there yet as the mean of its kind there now, else
    TYPICAL (else of unknown size); a file there now is replaced by one of about its size. Paths on
    other file systems (the venvs, elsewhere) are not counted."""
    results = Path(results)
    on = device(results)
    by_kind = {key: statistics.fmean(sizes) for key, sizes in sizes_by_kind(results).items()}
    planned = Planned()
    for path in dict.fromkeys(map(str, paths)):
        try:
            if os.path.lexists(path) or device(path) != on:
                continue
        except OSError:
            continue
        key = kind(os.path.relpath(os.path.realpath(path), os.path.realpath(results)))
        size = by_kind.get(key, TYPICAL.get(key))
        if size is None:
            planned.unknown.append(path)
            continue
        planned.bytes += int(size)
        planned.files += 1
    return planned


def job_paths(jobs):
    """The files Snakemake jobs will write: outputs, logs and benchmark files."""
    return [str(path) for job in jobs
            for path in (*job.output, *job.log, *([job.benchmark] if job.benchmark else []))]


def room_warning(results, planned):
    """A line when the file system of `results` has less room than `planned` (Planned, or bytes)
    needs; None when it has room."""
    planned = planned if isinstance(planned, Planned) else Planned(int(planned), 1)
    try:
        room = free_bytes(results)
    except OSError as err:
        return f"dlbench room: cannot tell the room left on {results}'s file system: {err}"
    if room >= planned.bytes:
        return None
    return (f"dlbench room: {results}/ is on a file system ({mount_point(results)}) with {size_words(room)} free, less "
            f"than this invocation is planned to write ({planned.words()}): jobs will fail for want of space; "
            "make room, or move results/ (docs/failure.md)")
