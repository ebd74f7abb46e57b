"""A full disk says so (dlbench.disk): a job that fails for want of space, memory or a permission is
named on the end line with the path and its file system's free space, and before the first job the
workflow warns when results/ has less room than the run will write. On real small file systems
(a tmpfs: root only, as the SLURM test's cluster)."""
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager

import pytest

from dlbench import disk
from dlbench.disk import FailedJob, cause_in, failed_job_lines, planned_bytes, room_warning
from conftest import REPO, copy_workflow, own_python, snakemake
from test_new_workload import add_toy_workload


@contextmanager
def small_disk(folder, size="200k"):
    """A tmpfs of `size` mounted on `folder`, unmounted at the end."""
    folder.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.fail(f"the full-disk tests mount a small tmpfs, which needs root: {mount.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


def fill(folder, leave=0):
    """Write a filler file in `folder` until its file system is full, then free `leave` bytes of it."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


# ---- why a job failed, from its log

@pytest.mark.parametrize("text, found", [
    ("dlbench failed: no space left on device: results/tables/a-units.csv; its file system (/r) has 4.0 KiB free\n",
     ("no space left on device", "results/tables/a-units.csv")),
    ("Traceback (most recent call last):\n  ...\nOSError: [Errno 28] No space left on device: 'results/x.json'\n",
     ("no space left on device", "results/x.json")),
    ("Collecting torch\nERROR: Could not install packages due to an OSError: [Errno 28] No space left on device\n",
     ("no space left on device", None)),
    ("PermissionError: [Errno 13] Permission denied: '/data/nih/images'\n", ("permission denied", "/data/nih/images")),
    ("OSError: [Errno 30] Read-only file system: 'results/t.csv'\n", ("read-only file system", "results/t.csv")),
    ("  File \"x.py\", line 3\nMemoryError\n", ("out of memory", None)),
    ("dlbench failed: out of memory (MemoryError)\n", ("out of memory", None)),
    ("ValueError: the batch is larger than the data\n", None),
    ("", None),
])
def test_the_cause_is_read_from_the_end_of_the_log(text, found):
    assert cause_in(text) == found


def test_a_permission_denied_early_in_the_log_is_not_the_cause_of_its_end():
    text = "warning: /proc/x: Permission denied\n" + "step\n" * 40 + "ValueError: bad shape\n"
    assert cause_in(text) is None


def test_a_failed_job_with_a_cause_is_named_with_its_path_and_a_job_without_one_with_its_log(tmp_path):
    log = tmp_path / "aggregate.log"
    log.write_text("PermissionError: [Errno 13] Permission denied: 'results/tables/x.csv'\n")
    other = tmp_path / "other.log"
    other.write_text("ValueError: no\n")
    lines = failed_job_lines([FailedJob("aggregate run_set=x", (str(log),), ("results/tables/x.csv",)),
                              FailedJob("headline", (str(other),), (str(tmp_path / "h.csv"),))])
    assert lines == ["dlbench jobs: 2 failed",
                     f"  failed, permission denied: aggregate run_set=x: results/tables/x.csv (log: {log})",
                     f"  failed: headline (log: {other})"]


def test_a_job_whose_log_names_no_cause_while_the_oom_killer_ended_processes_is_possibly_out_of_memory(
        tmp_path, monkeypatch):
    log = tmp_path / "prepare.log"
    log.write_text("reading the images\n")  # then SIGKILL: nothing more
    job = FailedJob("prepare_chestxray", (str(log),), (str(tmp_path / "images.npy"),))
    monkeypatch.setattr(disk, "oom_kills", lambda: 7)
    assert failed_job_lines([job], oom_kills_before=5)[1] == (
        "  failed, possibly out of memory (the kernel's OOM killer ended 2 process(es) while this invocation ran): "
        f"prepare_chestxray (log: {log})")
    assert failed_job_lines([job], oom_kills_before=7)[1] == f"  failed: prepare_chestxray (log: {log})"


def test_the_jobs_a_signal_stopped_are_said_stopped(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 3\n")
    assert failed_job_lines([FailedJob("train run_set=mnist", (str(log),))], stopped="SIGTERM") == [
        "dlbench jobs: 1 failed or stopped (SIGTERM)", f"  stopped: train run_set=mnist (log: {log})"]


def test_an_empty_log_on_a_full_disk_is_said_probably_for_want_of_space(tmp_path):
    with small_disk(tmp_path / "results") as results:
        (results / "logs").mkdir()
        log = results / "logs" / "aggregate.log"
        log.touch()  # the shell made it; the job could write nothing to it
        fill(results)
        job = FailedJob("aggregate run_set=x", (str(log),), (str(results / "tables" / "x-runs.csv"),))
        head, line = failed_job_lines([job])
        assert head == "dlbench jobs: 1 failed"
        assert line.startswith(f"  failed, probably for want of space (its log is empty): aggregate run_set=x: "
                               f"{results}/tables/x-runs.csv; its file system ({results}) has "), line
        assert re.search(r"has (\d+ bytes|[\d.]+ KiB) free", line), line
        # the same empty log with room (more than disk.MIN_ROOM): no guess
        (results / "filler").unlink()
        subprocess.run(["mount", "-o", "remount,size=8m", str(results)], check=True)
        assert failed_job_lines([job])[1:] == [f"  failed: aggregate run_set=x (log: {log})"]


# ---- a script that writes a table on a full disk says so in its log

WRITE_TABLE = """
import sys
import pandas as pd
from dlbench.disk import partial, run_main

def main():
    out = sys.argv[1]
    frame = pd.DataFrame({"x": range(40000), "y": ["a long enough text"] * 40000})  # about 1 MiB
    with partial(out + ".tmp", name=out):
        frame.to_csv(out + ".tmp", index=False)
    print("written")

run_main(main)
"""


def test_a_table_cut_short_by_a_full_disk_is_removed_and_its_log_says_so(tmp_path):
    """A 200 KiB tmpfs holds the table and the job's log, as results/ would: the write fails, the cut
    file is removed, and the room it took holds the log's line, which the end line reads."""
    with small_disk(tmp_path / "results") as results:
        table, log = results / "tables" / "x-units.csv", results / "logs" / "aggregate.log"
        table.parent.mkdir()
        log.parent.mkdir()
        with open(log, "w") as out:
            proc = subprocess.run([sys.executable, "-c", WRITE_TABLE, str(table)], stdout=out, stderr=subprocess.STDOUT)
        assert proc.returncode == 28  # ENOSPC
        assert sorted(p.name for p in table.parent.iterdir()) == [], "the cut table was left behind"
        said = log.read_text()
        assert said.startswith(f"dlbench failed: no space left on device: {table}; "
                               f"its file system ({results}) has "), said
        assert "Traceback" not in said
        _, line = failed_job_lines([FailedJob("aggregate run_set=x", (str(log),), (str(table),))])
        assert line.startswith(f"  failed, no space left on device: aggregate run_set=x: {table}; "
                               f"its file system ({results}) has "), line
        assert line.endswith(f"free (log: {log})")


def test_aggregate_on_a_full_disk_exits_with_enospc_and_leaves_no_cut_table(tmp_path):
    """The real script, its tables on a full tmpfs (its log elsewhere, where it can be read)."""
    tables = ("runs", "convergence", "units", "points", "ratios", "environment", "unsuccessful", "utilisation")
    with small_disk(tmp_path / "tables") as folder:
        fill(folder)
        out = {name: folder / f"{name}.csv" for name in tables}
        proc = own_python(str(REPO / "scripts" / "aggregate.py"), "--min-unit-seconds", "0", "--max-other-cpus", "0.5",
                          *[arg for name, path in out.items() for arg in (f"--{name}", str(path))],
                          capture_output=True, text=True)
        assert proc.returncode == 28, proc.stderr
        assert proc.stderr.startswith(f"dlbench failed: no space left on device: {folder}/runs.csv; "
                                      f"its file system ({folder}) has "), proc.stderr
        assert sorted(p.name for p in folder.iterdir()) == ["filler"]


# ---- before the first job: room for what the run will write

def test_the_planned_bytes_are_the_mean_of_each_kind_there_and_a_typical_size_else(tmp_path):
    results = tmp_path / "results"
    for name, size in (("runs/a/pytorch/r1.json", 1000), ("runs/a/jax/r1.json", 3000), ("logs/runs/a/jax/r1.log", 500)):
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_bytes(b"x" * size)
    planned = planned_bytes([results / "runs/a/pytorch/r2.json", results / "runs/b/jax/r1.json",  # 2000 each
                             results / "runs/a/jax/r1.json",  # there now: replaced, adds nothing
                             results / "logs/runs/b/jax/r1.log",  # 500
                             results / "tables/a-units.csv",  # none there: typical
                             results / "data/mnist/train-images.npy"], results)  # of unknown size
    assert planned.bytes == 2000 + 2000 + 500 + disk.TYPICAL["tables", ".csv"] and planned.files == 4
    assert planned.unknown == [str(results / "data/mnist/train-images.npy")]
    assert planned.words() == "at least 24 KiB in 4 files, and 1 of unknown size"


def test_a_results_folder_with_less_room_than_planned_is_warned_of_and_one_with_room_is_not(tmp_path):
    with small_disk(tmp_path / "results") as results:
        (results / "runs" / "a").mkdir(parents=True)
        (results / "runs" / "a" / "r1.json").write_bytes(b"x" * 12000)
        planned = planned_bytes([results / "runs" / "a" / f"r{i}.json" for i in range(2, 40)], results)
        assert planned.bytes == 38 * 12000
        warning = room_warning(results, planned)
        assert re.fullmatch(rf"dlbench room: {results}/ is on a file system \({results}\) with \d+ KiB free, less than "
                            r"this invocation is planned to write \(about 445 KiB in 38 files\): jobs will fail for "
                            r"want of space; make room, or move results/ \(docs/failure.md\)", warning), warning
        assert room_warning(results, planned_bytes([results / "runs" / "a" / "r2.json"], results)) is None


def test_paths_on_another_file_system_are_not_counted(tmp_path):
    with small_disk(tmp_path / "results") as results:
        assert planned_bytes([tmp_path / "venvs" / "torch" / "python", results / "logs" / "x.log"], results).files == 1


# ---- the workflow: results/ on a full disk

@pytest.mark.slow
def test_a_full_results_disk_is_warned_of_before_the_first_job_and_named_on_the_end_line(tmp_path):
    """As the issue found it: the records there, results/ on a file system with 8 KiB free. The
    invocation warns before its first job; aggregate fails, its tables are removed, and the end line
    names the cause, the table and the file system's free space; with room again, it runs."""
    workflow = copy_workflow(tmp_path / "workflow")
    add_toy_workload(workflow)
    run = ("--cores", "2", "--configfile", "presets/smoke.yaml", "--config", "workloads=[toy]", "studies=[]",
           "frameworks=[pytorch]")
    record = "results/runs/toy/pytorch/batch~32_repeat~1.json"
    snakemake(record, *run, cwd=workflow)  # trained with room
    kept = shutil.move(workflow / "results", tmp_path / "kept")
    with small_disk(workflow / "results", "4m") as results:
        shutil.copytree(kept, results, dirs_exist_ok=True)
        fill(results, leave=8 << 10)
        proc = snakemake("results/tables/toy-runs.csv", *run, cwd=workflow, check=False)
        err = proc.stderr
        assert proc.returncode != 0, err[-3000:]
        warning = re.search(rf"dlbench room: results/ is on a file system \({results}\) with [\d.]+ (bytes|KiB) "
                            r"free, less than this invocation is planned to write \(about .* in \d+ files\)", err)
        assert warning and warning.start() < err.index("dlbench runs:"), err[-3000:]
        assert "dlbench runs: 1 ok, 0 not applicable, 0 failed" in err, err[-3000:]
        assert re.search(r"dlbench jobs: 1 failed\n  failed, (no space left on device|probably for want of space "
                         r"\(its log is empty\)): aggregate run_set=toy: results/tables/toy-[a-z-]+\.csv; "
                         rf"its file system \({results}\) has [\d.]+ (bytes|KiB) free "
                         r"\(log: results/logs/report/aggregate-toy\.log\)", err), err[-3000:]
        assert not list((results / "tables").glob("toy-*")), "a cut table was left behind"
        (results / "filler").unlink()
        again = snakemake("results/tables/toy-runs.csv", *run, cwd=workflow)
        assert "dlbench room:" not in again.stderr and "dlbench jobs:" not in again.stderr
        assert len((results / "tables" / "toy-runs.csv").read_text().splitlines()) == 2
