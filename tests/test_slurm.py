"""The cluster path against a real SLURM: a two-node cluster on this machine (tests/slurm_cluster.py,
Debian's slurm-wlm and munge), srun placing a run's node processes, and the smoke preset's
MNIST (every framework and strategy, on 1 and 2 nodes: the points whose placement SLURM decides)
submitted through `--workflow-profile profiles/slurm`: every job a SLURM job, every record
valid and naming the SLURM nodes it ran on (both nodes for the 2-node points), the report
built. The daemons are stopped when the module ends."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_workflow, snakemake
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
def test_a_cluster_profile_asks_for_what_each_point_needs(profile):
    """The executor's resources come from the point: nodes and one task per node, the node's
    cores, GPUs only with device: gpu, memory by workload, time from the workload's timeout."""
    dry = snakemake("-n", "--workflow-profile", f"profiles/{profile}", "--cores", "2", "--configfile",
                    "presets/smoke.yaml")
    jobs = job_resources(dry.stdout)
    point = "results/runs/mnist/pytorch/model~small_duplicate~1_batch~64_devices~{}_nodes~{}_strategy~{}_mode~eager_repeat~1.json"
    one = jobs[point.format(1, 1, "single")]
    assert (one["nodes"], one["tasks"], one["cpus_per_task"], one["gpu"]) == ("1", "1", "2", "0")
    assert one["mem_mb"] == "8000" and one["runtime"] == str(10 + 15)  # smoke mnist: 10 minutes, + the margin
    assert jobs["results/runs/chestxray/pytorch/input~real_devices~1_nodes~1_strategy~single_mode~eager_repeat~1.json"][
        "mem_mb"] == "32000"
    if profile == "slurm":
        two = jobs[point.format(2, 2, "ddp")]
        assert (two["nodes"], two["tasks"], two["mpi"], two["slurm_extra"]) == ("2", "2", "srun", "--exclusive")
        assert one["mpi"] == ""  # one node: no launcher
    gpu = job_resources(snakemake("-n", "--workflow-profile", f"profiles/{profile}", "--cores", "2", "--configfile",
                                  "presets/smoke.yaml", "--config", "device=gpu").stdout)
    assert gpu[point.format(2, 1, "ddp")]["gpu"] == "2" and gpu[point.format(1, 1, "single")]["gpu"] == "1"
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


@pytest.fixture(scope="module")
def slurm_run(cluster, tmp_path_factory):
    root = copy_workflow(tmp_path_factory.mktemp("slurm-workflow"))
    # MNIST only: the other workloads' jobs ask SLURM for the same things (the dry runs above) and
    # train as the local smoke run does; the whole preset took 25 of CI's 90 minutes.
    (root / "mnist.yaml").write_text("workloads: [mnist]\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", cluster["SLURM_CONF"])
        run = snakemake(*SLURM, "mnist.yaml", cwd=root, check=False)
        snakemake("--report", "results/report.html", "--configfile", "presets/smoke.yaml", "mnist.yaml", cwd=root)
    return root, run


def test_the_smoke_preset_runs_as_slurm_jobs_with_valid_records_naming_their_nodes(slurm_run):
    root, run = slurm_run
    assert run.returncode == 0, run.stderr[-6000:]
    assert re.search(r"dlbench runs: .*\b0 failed", run.stderr), run.stderr[-3000:]
    # every job went through sbatch: the training runs' jobs at least
    submitted = len(re.findall(r"has been submitted with SLURM jobid \d+", run.stderr))
    assert submitted >= len(list((root / "results" / "runs").rglob("*.json")))
    records = load_records(sorted((root / "results" / "runs").rglob("*.json")))  # each validated
    assert {r["status"] for r in records} <= {"ok", "not_applicable"}
    ran = [r for r in records if r["status"] == "ok"]
    assert all(len(r["nodes"]) == r["spec"].get("nodes", 1) for r in ran)
    assert all({n["hostname"] for n in r["nodes"]} <= set(NODES) for r in ran)
    two = [r for r in ran if r["spec"].get("nodes", 1) == 2]
    assert {r["framework"] for r in two} == {"pytorch", "tensorflow", "mxnet", "jax", "keras-jax"}
    assert all([n["hostname"] for n in r["nodes"]] == list(NODES) for r in two)  # one process on each node
    html = (root / "results" / "report.html").read_text()
    assert "mnist-runs.csv" in html
