"""Runs across nodes: how the processes of a multi-node run find each other.

A run of `spec.nodes` nodes starts one training process (dlbench.protocol) per node; each
framework's adapter starts its processes on the node from it (`launch`) and joins them with
its own multi-node mechanism (PyTorch's env:// rendezvous, TF_CONFIG, MXNet's DMLC_*
variables, jax.distributed, MPI). A node's process learns its place from the environment
only, as on a cluster (`this_node`):

- the torchrun-style variables NODE_RANK, NNODES, MASTER_ADDR, MASTER_PORT where they are
  set (by a cluster's launcher, or by `python -m dlbench.nodes`, which starts N nodes on
  this machine: the same code path, tested);
- else SLURM's, under `srun`: SLURM_PROCID, SLURM_NTASKS, the hosts of SLURM_STEP_NODELIST
  (task 0 runs on the first), a port from the job id.

The harness starts a multi-node run with `launcher(nodes)`: srun inside a SLURM allocation,
else the local launcher below. Each node's process writes what it was (`node_file`: host,
its processes' peak memory) beside the results, for the record.

Ports: a framework uses `port + k` for its k-th service (TF's workers, MXNet's scheduler).
"""
import argparse
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dlbench.processes import die_with_parent, kill_group

PORT_SPAN = 64        # ports a run may use from its base port (one per process of a framework, at most)
SLURM_PORT_BASE = 20000
NODE_FILE = "node-{rank}.json"
SHARED_THREADS_VARIABLE = "DLBENCH_NODE_THREADS"  # set by the local launcher: its nodes share one machine's cores
HOSTS_VARIABLE = "DLBENCH_NODE_HOSTS"  # every node's host, comma-separated (the local launcher's: 127.0.0.1 each)


class NodeError(RuntimeError):
    """A multi-node run started without (or with a wrong) place in the environment."""


@dataclass(frozen=True)
class Node:
    rank: int        # this node, 0..nodes-1; node 0 holds the run's first process
    nodes: int
    address: str     # the host of node 0: every rendezvous is there
    port: int | None  # the run's base port at `address` (None: one node, the framework picks free ports)
    threads: int     # CPU threads this node's processes share
    hostname: str    # this node's name, for the record
    hosts: tuple | None = None  # every node's host, in node order, where the environment says (SLURM's
                                # node list, DLBENCH_NODE_HOSTS); a framework whose cluster lists every
                                # process (TF_CONFIG) needs them

    def global_rank(self, local_rank, local_processes):
        """A process's rank in the run: the nodes' processes in node order."""
        return self.rank * local_processes + local_rank


def free_port(span=1, host="127.0.0.1"):
    """A port p on this host with p .. p+span-1 free now (a run's base port)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind((host, 0))
            base = s.getsockname()[1]
        if base + span > 65535:
            continue
        try:
            held = []
            for port in range(base + 1, base + span):
                s = socket.socket()
                held.append(s)
                s.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise NodeError(f"no {span} consecutive free ports on {host}")


def _scontrol(*args):
    try:
        return subprocess.run(["scontrol", *args], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as err:
        raise NodeError(f"scontrol {' '.join(args)} failed: {getattr(err, 'stderr', None) or err}")


def slurm_hosts(nodelist):
    """The addresses of a SLURM node list's nodes, in its order (node[03-04] -> their NodeAddr, which
    is their host name unless the site says otherwise), as scontrol expands and knows them."""
    names = _scontrol("show", "hostnames", nodelist).split()
    addresses = {}
    for line in _scontrol("-o", "show", "node", nodelist).splitlines():
        fields = dict(field.split("=", 1) for field in line.split() if "=" in field)
        addresses[fields.get("NodeName")] = fields.get("NodeAddr") or fields.get("NodeName")
    return tuple(addresses.get(name, name) for name in names)


def _from_environment(env):
    """(rank, nodes, address, port, hosts) from the environment, or None where it says nothing."""
    hosts = tuple(env[HOSTS_VARIABLE].split(",")) if env.get(HOSTS_VARIABLE) else None
    if "NNODES" in env:
        try:
            return int(env["NODE_RANK"]), int(env["NNODES"]), env["MASTER_ADDR"], int(env["MASTER_PORT"]), hosts
        except KeyError as missing:
            raise NodeError(f"NNODES is set but {missing.args[0]} is not: a multi-node run needs NODE_RANK, "
                            f"NNODES, MASTER_ADDR and MASTER_PORT")
    if "SLURM_PROCID" in env and "SLURM_STEP_NODELIST" in env:
        # one task per node (dlbench.nodes.launcher): task i runs on the step's i-th host
        hosts = slurm_hosts(env["SLURM_STEP_NODELIST"])
        port = int(env.get("MASTER_PORT") or SLURM_PORT_BASE + int(env["SLURM_JOB_ID"]) % (30000 - PORT_SPAN))
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), env.get("MASTER_ADDR") or hosts[0], port, hosts
    return None


def this_node(spec, env=None):
    """This process's node in the run of `spec`. One node: this machine, no rendezvous yet."""
    env = os.environ if env is None else env
    hostname = env.get("SLURMD_NODENAME") or socket.gethostname()  # SLURM's name of the node, under srun
    if spec.nodes == 1:
        return Node(0, 1, "127.0.0.1", None, spec.threads, hostname)
    place = _from_environment(env)
    if place is None:
        raise NodeError(f"this run spans {spec.nodes} nodes but nothing in the environment says which node this "
                        f"is: start it with srun (SLURM) or python -m dlbench.nodes, which set NODE_RANK, NNODES, "
                        f"MASTER_ADDR and MASTER_PORT")
    rank, nodes, address, port, hosts = place
    if nodes != spec.nodes or not 0 <= rank < nodes:
        raise NodeError(f"the environment places this process as node {rank} of {nodes}; the run asks for "
                        f"{spec.nodes} nodes")
    threads = int(env.get(SHARED_THREADS_VARIABLE) or spec.threads)
    return Node(rank, nodes, address, port, threads, hostname, hosts)


def devices_per_node(spec):
    if spec.devices % spec.nodes:
        raise NodeError(f"{spec.devices} devices do not divide over {spec.nodes} nodes")
    return spec.devices // spec.nodes


# --- what each node was, for the record ---------------------------------------------------------

def node_file(result_path, rank):
    return Path(result_path).resolve().parent / NODE_FILE.format(rank=rank)


def write_node_file(result_path, node):
    """This node's host and its processes' peak memory (this process and its waited-for children)."""
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    Path(node_file(result_path, node.rank)).write_text(json.dumps(
        {"rank": node.rank, "hostname": node.hostname, "peak_rss_bytes": peak * 1024}))


def read_node_files(result_path, nodes):
    """What each node of a run wrote, in node order ({} for a node that wrote nothing)."""
    found = []
    for rank in range(nodes):
        path = node_file(result_path, rank)
        found.append(json.loads(path.read_text()) if path.exists() else {"rank": rank})
    return found


# --- starting a multi-node run ----------------------------------------------------------------------



def in_slurm_allocation(env=None):
    env = os.environ if env is None else env
    return "SLURM_JOB_ID" in env


def launcher(nodes, threads, env=None):
    """The command prefix that starts one process per node: srun inside a SLURM allocation (one
    task per node), else the local launcher (N nodes on this machine, sharing its `threads`)."""
    if in_slurm_allocation(env):
        return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                "--cpu-bind=none", "--overlap"]
    return [sys.executable, "-m", "dlbench.nodes", "--nodes", str(nodes), "--threads", str(threads), "--"]


def launch_local(nodes, threads, command):
    """Run `command` once per node on this machine, each told its place only through the
    environment (NODE_RANK, NNODES, MASTER_ADDR, MASTER_PORT), as a cluster's launcher does;
    the nodes share `threads` cores. Returns the first failure's exit code, else 0; a failure
    stops the others (their collectives would wait for it)."""
    port = free_port(PORT_SPAN)
    processes = [subprocess.Popen(command, start_new_session=True, env={
        **os.environ, "NODE_RANK": str(rank), "NNODES": str(nodes), "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port), HOSTS_VARIABLE: ",".join(["127.0.0.1"] * nodes),
        SHARED_THREADS_VARIABLE: str(max(1, threads // nodes))})
        for rank in range(nodes)]
    try:
        while True:
            codes = [p.poll() for p in processes]
            failed = [code for code in codes if code not in (None, 0)]
            if failed:
                print(f"dlbench.nodes: node(s) {[r for r, c in enumerate(codes) if c not in (None, 0)]} failed "
                      f"(exit codes {failed}); stopping the others", file=sys.stderr)
                return failed[0]
            if all(code == 0 for code in codes):
                return 0
            time.sleep(0.1)
    finally:
        for p in processes:
            kill_group(p.pid)
            p.wait()


def main():
    parser = argparse.ArgumentParser(description="Start a multi-node run's processes on this machine.")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True, help="CPU threads the nodes share")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command each node runs")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    die_with_parent(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run launch_local's finally: stop the nodes
    sys.exit(launch_local(args.nodes, args.threads, command))


if __name__ == "__main__":
    main()
