"""Runs across nodes (dlbench.nodes): a node's place from the environment (torchrun's variables,
SLURM's), the local launcher, and for every framework with a strategy that spans nodes, a run
of 2 nodes x 1 device on this machine (2 processes that find each other only through the
environment, as on a cluster) against 1 node x 2 devices: the same global batch, the same
sample order, the same losses and metric, and a record naming both nodes."""
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import smoke_records
from dlbench.frameworks import FRAMEWORKS
from dlbench.nodes import NodeError, launcher, this_node
from specs import smoke_spec

MULTI_NODE = [(framework, strategy) for framework, spec in FRAMEWORKS.items() for strategy in spec.multi_node]


def test_one_node_needs_no_rendezvous():
    node = this_node(smoke_spec("mnist", "pytorch", threads=2), env={})
    assert (node.rank, node.nodes, node.port, node.threads) == (0, 1, None, 2)


def test_a_node_finds_its_place_in_torchrun_s_variables():
    spec = smoke_spec("mnist", "pytorch", devices=2, nodes=2, strategy="ddp")
    node = this_node(spec, env={"NODE_RANK": "1", "NNODES": "2", "MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500"})
    assert (node.rank, node.nodes, node.address, node.port) == (1, 2, "10.0.0.7", 29500)
    assert node.global_rank(local_rank=0, local_processes=1) == 1


def test_a_multi_node_run_without_its_place_or_with_another_size_stops_naming_it():
    spec = smoke_spec("mnist", "pytorch", devices=2, nodes=2, strategy="ddp")
    with pytest.raises(NodeError, match="spans 2 nodes.*srun"):
        this_node(spec, env={})
    with pytest.raises(NodeError, match="node 0 of 3"):
        this_node(spec, env={"NODE_RANK": "0", "NNODES": "3", "MASTER_ADDR": "a", "MASTER_PORT": "1"})
    with pytest.raises(NodeError, match="MASTER_PORT"):
        this_node(spec, env={"NODE_RANK": "0", "NNODES": "2", "MASTER_ADDR": "a"})


def test_the_launcher_is_srun_inside_a_slurm_allocation_else_the_local_one():
    assert launcher(2, 8, env={"SLURM_JOB_ID": "7"})[:3] == ["srun", "--nodes=2", "--ntasks=2"]
    assert launcher(2, 8, env={})[1:3] == ["-m", "dlbench.nodes"]


def test_the_local_launcher_gives_each_node_its_place_and_stops_all_when_one_fails(tmp_path):
    # one write a line: the three processes share the pipe (print writes the newline apart when unbuffered)
    show = ("import json, sys; from dlbench.nodes import this_node; from specs import smoke_spec; "
            "n = this_node(smoke_spec('mnist', 'pytorch', threads=6, devices=3, nodes=3, strategy='ddp')); "
            "sys.stdout.write(json.dumps([n.rank, n.nodes, n.port, n.threads, n.hosts]) + '\\n')")
    proc = subprocess.run(launcher(3, 6) + [sys.executable, "-c", show], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": f"{Path(__file__).parent}:{os.environ['PYTHONPATH']}"})
    assert proc.returncode == 0, proc.stderr
    places = sorted(json.loads(line) for line in proc.stdout.splitlines())
    assert [place[:2] for place in places] == [[0, 3], [1, 3], [2, 3]]
    assert len({place[2] for place in places}) == 1  # one rendezvous port
    # the nodes share this machine's 6 threads as 3 processes of one node would; all at this host
    assert {place[3] for place in places} == {2} and places[0][4] == ["127.0.0.1"] * 3
    fail = ("import os, sys, time\nif os.environ['NODE_RANK'] == '1': sys.exit(3)\n"
            "time.sleep(60)")
    proc = subprocess.run(launcher(2, 2) + [sys.executable, "-c", fail], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3 and "node(s) [1] failed" in proc.stderr


def two_device_run(root, framework, strategy, nodes):
    """The smoke run's MNIST run of a strategy on 2 devices of `nodes` nodes, which trained."""
    (record,) = [r for r in smoke_records(root, "mnist", framework)
                 if (r["spec"]["strategy"], r["spec"]["devices"], r["spec"]["nodes"]) == (strategy, 2, nodes)]
    assert record["status"] == "ok", record["error"]
    return record


@pytest.mark.slow
@pytest.mark.parametrize("framework, strategy", MULTI_NODE)
def test_two_nodes_train_as_two_devices_of_one_node(framework, strategy, smoke_run):
    """The session's smoke run trains both placements of every strategy that spans nodes."""
    one = two_device_run(smoke_run, framework, strategy, nodes=1)
    two = two_device_run(smoke_run, framework, strategy, nodes=2)
    assert two["spec"]["nodes"] == 2 and one["spec"]["nodes"] == 1
    assert (one["spec"]["batch"], one["spec"]["devices"]) == (two["spec"]["batch"], two["spec"]["devices"])
    assert one["order_sha256"] == two["order_sha256"] is not None  # the same global batches, in the same order
    assert [n["rank"] for n in two["nodes"]] == [0, 1] and [n["rank"] for n in one["nodes"]] == [0]
    assert {n["hostname"] for n in two["nodes"]} == {socket.gethostname()}
    assert two["devices_used"]["count"] == one["devices_used"]["count"] == 2
    # the same start, data and global batches: the same losses (collectives may sum in another order)
    assert len(one["segments"]) == len(two["segments"]) > 0
    for a, b in zip(one["segments"] + one["units"], two["segments"] + two["units"]):
        assert b["samples"] == a["samples"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4), (a, b)
    assert two["segments"][-1]["metric"] == pytest.approx(one["segments"][-1]["metric"], abs=0.01)


def test_the_nodes_preset_plans_both_placements_of_every_framework_that_spans_nodes():
    from conftest import snakemake

    dry = snakemake("-n", "--forceall", "--configfile", "presets/nodes.yaml").stdout
    runs = sorted(set(re.findall(r"output: results/runs/mnist/([\w-]+)/\S+_devices~2_nodes~(\d)_", dry)))
    assert runs == sorted((framework, nodes) for framework in ("pytorch", "tensorflow", "mxnet", "jax", "keras-jax")
                          for nodes in ("1", "2"))
