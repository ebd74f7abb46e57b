"""The cluster path against a real SLURM: a two-node cluster on this machine (tests/slurm_cluster.py,
Debian's slurm-wlm and munge), srun placing a run's node processes, and the smoke preset's
MNIST runs whose placement SLURM decides (every strategy that spans nodes on 2 nodes, and one run
of one node) submitted through `--workflow-profile profiles/slurm`: every job a SLURM job,
every record valid and naming the SLURM nodes it ran on (both nodes for the 2-node runs); and jobs
that SLURM ends mid-training (scancel, a time limit): not run, SLURM's reason in the run's log and on
the end line, the other job finished, and the next invocation runs exactly those. The daemons are
stopped when the module ends."""
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import copy_workflow, snakemake
from dlbench.frameworks import FRAMEWORKS
from dlbench.tables import load_records
from slurm_cluster import NODES, available, local_slurm

pytestmark = pytest.mark.slow

# The test cluster's two nodes have 2 CPUs each (this machine's two cores, shared): a run
# takes a node's 2 cores, as a run on a cluster takes a node's. squeue, not sacct (no accounting
# database here); status checks every few seconds, not every 40.
SLURM = ("--workflow-profile", "profiles/slurm", "--cores", "2", "--slurm-status-command", "squeue",
         "--slurm-init-seconds-before-status-checks", "2", "--configfile", "presets/smoke.yaml")


def job_resources(dry_run_output):
    """{record path: {resource: value}} of the training jobs of a dry run."""
    found = {}
    for block in dry_run_output.split("rule train:")[1:]:
        output = re.search(r"output: \S*?(results/runs/\S+?\.json)", block)[1]  # less a storage prefix
        line = re.search(r"resources: (.*)", block)[1]
        found[output] = dict(item.split("=", 1) for item in line.split(", "))
    return found


@pytest.mark.parametrize("profile", ["slurm", "kubernetes"])
def test_a_cluster_profile_asks_for_what_each_point_needs(profile, tmp_path):
    """The executor's resources come from the point: nodes and one task per node, the node's
    cores, GPUs only with device_kind: gpu, memory by workload, time from the workload's timeout."""
    alone = tmp_path / "alone.yaml"  # one run at a time, as every measurement (the smoke preset: two)
    alone.write_text("measurement: {runs_at_once: 1}\n")
    dry = snakemake("-n", "--workflow-profile", f"profiles/{profile}", "--cores", "2", "--configfile",
                    "presets/smoke.yaml", str(alone))
    jobs = job_resources(dry.stdout)
    point = "results/runs/mnist/pytorch/model~small_duplicate~1_batch~64_devices~{}_nodes~{}_strategy~{}_mode~eager_precision~float32_repeat~1.json"
    one = jobs[point.format(1, 1, "none")]
    assert (one["nodes"], one["tasks"], one["cpus_per_task"], one["gpu"]) == ("1", "1", "2", "0")
    assert one["mem_mb"] == "8000" and one["runtime"] == str(10 + 15)  # smoke mnist: 10 minutes, + the margin
    assert jobs["results/runs/chestxray/pytorch/input~real_devices~1_nodes~1_strategy~none_mode~eager_precision~float32_repeat~1.json"][
        "mem_mb"] == "32000"
    if profile == "slurm":
        two = jobs[point.format(2, 2, "ddp")]
        assert (two["nodes"], two["tasks"], two["mpi"], two["slurm_extra"]) == ("2", "2", "srun", "--exclusive")
        assert one["mpi"] == ""  # one node: no launcher
    gpu = job_resources(snakemake("-n", "--workflow-profile", f"profiles/{profile}", "--cores", "2", "--configfile",
                                  "presets/smoke.yaml", "--config", "device_kind=gpu").stdout)
    assert gpu[point.format(2, 1, "ddp")]["gpu"] == "2" and gpu[point.format(1, 1, "none")]["gpu"] == "1"
    assert gpu[point.format(2, 2, "ddp")]["gpu"] == "1"  # devices per node


def test_the_test_cluster_never_replaces_a_slurm_configuration(tmp_path, monkeypatch):
    import slurm_cluster

    existing = tmp_path / "slurm.conf"
    existing.write_text("ClusterName=theirs\n")
    monkeypatch.setattr(slurm_cluster, "SYSTEM_CONF", existing)
    with pytest.raises(RuntimeError, match="has a SLURM of its own"):
        with local_slurm(tmp_path / "cluster"):
            pass
    assert existing.read_text() == "ClusterName=theirs\n"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = available()
    if reason:
        pytest.fail(f"the SLURM test needs a local SLURM: {reason}")
    with local_slurm(tmp_path_factory.mktemp("slurm")) as env:
        yield env


def test_srun_gives_each_node_process_its_place(cluster, monkeypatch):
    # one write a line: the two tasks share srun's output (print writes the newline apart when unbuffered)
    code = ("import json, sys; from dlbench.nodes import this_node; from specs import smoke_spec; "
            "n = this_node(smoke_spec('mnist', 'pytorch', devices=2, nodes=2, strategy='ddp')); "
            "sys.stdout.write(json.dumps([n.rank, n.nodes, n.address, n.hostname, n.hosts]) + '\\n')")
    proc = subprocess.run(["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", sys.executable, "-c", code],
                          env={**cluster, "PYTHONPATH": f"{Path(__file__).parent}:{cluster['PYTHONPATH']}"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    places = sorted(json.loads(line) for line in proc.stdout.splitlines())
    # task i on the step's i-th node; the rendezvous at node1's address (NodeAddr)
    assert places == [[0, 2, "127.0.0.1", "node1", ["127.0.0.1"] * 2], [1, 2, "127.0.0.1", "node2", ["127.0.0.1"] * 2]]


# The runs whose placement SLURM decides: every strategy that spans nodes on 2 nodes x 1 device, and
# one run of one node. The other runs' jobs ask SLURM for the same things (the dry runs above) and
# train as the session's local smoke run does (tests/test_workflow.py); the whole smoke preset as
# SLURM jobs took 25 of CI's 90 minutes, its MNIST 5.
RECORD = "results/runs/mnist/{}/model~small_duplicate~1_batch~64_devices~{}_nodes~{}_strategy~{}_mode~{}_precision~float32_repeat~1.json"
TWO_NODES = [RECORD.format(name, 2, 2, strategy, framework.modes[0][0])
             for name, framework in FRAMEWORKS.items() for strategy in framework.multi_node]
ONE_NODE = RECORD.format("pytorch", 1, 1, "none", "eager")


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory):
    root = copy_workflow(tmp_path_factory.mktemp("slurm-workflow"))
    (root / "mnist.yaml").write_text("workloads: [mnist]\nstudies: []\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", cluster["SLURM_CONF"])
        # the targets before --configfile, which takes every word after it
        run = snakemake(*TWO_NODES, ONE_NODE, *SLURM, "mnist.yaml", cwd=root, check=False)
    return root, run


def test_the_runs_spanning_nodes_run_as_slurm_jobs_with_valid_records_naming_their_nodes(slurm_run):
    root, run = slurm_run
    assert run.returncode == 0, run.stderr[-6000:]
    # every job went through sbatch: the training runs' jobs at least
    submitted = len(re.findall(r"has been submitted with SLURM jobid \d+", run.stderr))
    assert submitted >= len(TWO_NODES) + 1
    records = load_records([root / path for path in (*TWO_NODES, ONE_NODE)])  # each validated
    assert all(r["status"] == "ok" for r in records), [r["error"] for r in records]
    assert all({n["hostname"] for n in r["nodes"]} <= set(NODES) for r in records)
    two = [r for r in records if r["spec"]["nodes"] == 2]
    assert {r["framework"] for r in two} == {"pytorch", "tensorflow", "mxnet", "jax", "keras-jax"}
    assert all([n["hostname"] for n in r["nodes"]] == list(NODES) for r in two)  # one process on each node
    (one,) = [r for r in records if r["spec"]["nodes"] == 1]
    assert len(one["nodes"]) == 1


# A job that SLURM ends mid-training (docs/clusters.md, "A job SLURM ends"): one cancelled with
# scancel, then the same run past its time limit (`runtime` 1 minute: SLURM's TIMEOUT about a
# minute into the job, slurmctld checking limits every 30 s), each with a run that finishes. LONG
# trains the large model on all 60,000 digits (937 steps: minutes), SHORT is ONE_NODE (seconds).
LONG = RECORD.replace("model~small", "model~large").format("pytorch", 1, 1, "none", "eager")
LONG_CONFIG = "workloads: [mnist]\nstudies: []\nmnist:\n  models: [small, large]\n  train_images: {small: 1024, large: 60000}\n"
# --set-resources replaces the profile's set-resources: its --exclusive again
ONE_MINUTE = ("--set-resources", "train:slurm_extra='--exclusive'", "train:runtime=1")


def running_job(env, record):
    """The SLURM job id of the record's running training job (the plugin's comment names its wildcards), or None."""
    out = subprocess.run(["scontrol", "-o", "show", "job"], env=env, capture_output=True, text=True).stdout
    run = Path(record).stem
    for line in out.splitlines():
        fields = dict(re.findall(r"(?:^|\s)(\w+)=(\S*)", line))
        if fields.get("JobState") == "RUNNING" and fields.get("Comment", "").startswith("rule_train_") \
                and fields["Comment"].endswith(run):
            return fields["JobId"]
    return None


def training_started(root, record):
    """Whether the harness of the record's run has started its training process (its spec in the run's folder)."""
    for spec in (root / record).parent.glob(".dlbench-*/spec.json"):
        try:
            if json.loads(spec.read_text())["run_id"] == Path(record).stem:
                return True
        except (OSError, ValueError):
            pass  # being written, or its folder just went
    return False


def training_processes(root):
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        if "dlbench.protocol" in (proc.info["cmdline"] or []) and proc.info["cwd"] == str(root):
            found.append(proc.pid)
    return found


def run_and_cancel(root, env, *args):
    """Start Snakemake (SLURM's profile), scancel LONG's job once it trains; (the finished process, the job id,
    when it was cancelled)."""
    import time

    command = [sys.executable, "-m", "snakemake", *args]
    proc = subprocess.Popen(command, cwd=root, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    job, deadline = None, time.monotonic() + 480
    try:
        while job is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(1)
            if training_started(root, LONG):
                job = running_job(env, LONG)
        assert job is not None, "LONG's training never started"
        time.sleep(10)  # well into its 937 steps
        cancelled_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        subprocess.run(["scancel", job], env=env, check=True)
        out, err = proc.communicate(timeout=480)
    finally:
        if proc.poll() is None:  # the test failed: Snakemake cancels its jobs on SIGTERM (the plugin's scancel)
            proc.terminate()
            try:
                proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
            subprocess.run(["scancel", "--user", str(os.getuid())], env=env)
    return subprocess.CompletedProcess(command, proc.returncode, out, err), job, cancelled_at


@pytest.fixture(scope="module")
def stopped_runs(cluster, tmp_path_factory):
    """Three invocations in one copy: LONG cancelled, then SHORT; the same targets with a time limit of
    a minute (only LONG runs again, and times out); a dry run. What each left, as it left it."""
    from dlbench.scheduler import log_path, stopped_in_log

    root = copy_workflow(tmp_path_factory.mktemp("slurm-stopped"))
    (root / "long.yaml").write_text(LONG_CONFIG)
    found = SimpleNamespace(root=root)
    # one job at a time, LONG first: SHORT's job is submitted once LONG's has been cancelled
    found.cancelled, found.cancelled_job, found.cancelled_at = run_and_cancel(
        root, {**cluster}, LONG, ONE_NODE, "--jobs", "1", "--prioritize", LONG, *SLURM, "long.yaml")
    found.cancelled_why = stopped_in_log(root / log_path(LONG))  # before the next attempt writes the log again
    found.cancelled_record = (root / LONG).exists()
    found.cancelled_processes = training_processes(root)
    found.short_record = (root / ONE_NODE).read_text() if (root / ONE_NODE).exists() else None
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", cluster["SLURM_CONF"])
        found.timed_out = snakemake(LONG, ONE_NODE, *ONE_MINUTE, *SLURM, "long.yaml", cwd=root, check=False)
        found.timed_out_why = stopped_in_log(root / log_path(LONG))
        found.dry = snakemake("-n", LONG, ONE_NODE, *SLURM, "long.yaml", cwd=root, check=False)
    return found


def test_a_cancelled_job_is_not_run_with_slurms_reason_and_the_other_job_goes_on(stopped_runs):
    run, job, why = stopped_runs.cancelled, stopped_runs.cancelled_job, stopped_runs.cancelled_why
    # the plugin's word: a failed job, SLURM's state (with squeue as its status command, no reason)
    assert f"SLURM-job '{job}' failed, SLURM status is: 'CANCELLED'" in run.stderr, run.stderr[-6000:]
    assert not stopped_runs.cancelled_record  # no record: the next invocation runs it again
    # the harness's last line in the run's log, and the end line, name SLURM's reason
    assert why and why.startswith(f"stopped by SLURM: job {job} CANCELLED: cancelled (scancel"), why
    assert f"  not run: {LONG}: {why}\n" in run.stderr, run.stderr[-3000:]
    assert run.returncode != 0  # a job failed: the invocation says so
    assert stopped_runs.short_record is not None  # the other job went on, after the cancel, and finished
    (short,) = load_records([stopped_runs.root / ONE_NODE])
    assert short["status"] == "ok" and short["started_at"] > stopped_runs.cancelled_at
    assert not stopped_runs.cancelled_processes  # nothing of the cancelled training outlives it


def test_the_next_invocation_reruns_exactly_the_stopped_run_and_a_time_limit_says_timeout(stopped_runs):
    root, run, why = stopped_runs.root, stopped_runs.timed_out, stopped_runs.timed_out_why
    # the plugin's SLURM log of each job it submits: rule_<rule>/<its wildcards' values joined by _>/<job id>.log
    trained = re.findall(r"has been submitted with SLURM jobid \d+ \(log: \S*/rule_train/(\S+)/\d+\.log\)", run.stderr)
    assert trained == ["mnist_pytorch_" + Path(LONG).stem], trained  # exactly the cancelled run
    # the finished one is kept as it was
    assert (root / ONE_NODE).read_text() == stopped_runs.short_record
    timed_out = re.findall(r"SLURM-job '(\d+)' failed, SLURM status is: 'TIMEOUT'", run.stderr)
    assert len(timed_out) == 1, run.stderr[-6000:]
    (job,) = timed_out
    assert not (root / LONG).exists()
    assert why and why.startswith(f"stopped by SLURM: job {job} TIMEOUT: its time limit (00:01:00"), why
    assert f"  not run: {LONG}: {why}\n" in run.stderr, run.stderr[-3000:]
    # and the next invocation would run it again, and nothing else
    assert stopped_runs.dry.returncode == 0, stopped_runs.dry.stderr[-4000:]
    assert list(job_resources(stopped_runs.dry.stdout)) == [LONG]
