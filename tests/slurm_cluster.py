"""A SLURM cluster on this machine, for the tests: munged, slurmctld and two slurmd (nodes
node1 and node2, both on this host, as SLURM's multiple-slurmd mode allows), from Debian's
packages (slurm-wlm, munge; .ci/run installs them). Everything lives in one folder (key,
sockets, state, logs) but the configuration, which is written to /etc/slurm/slurm.conf (where
there is none) and removed at exit; the daemons run as the current user (root in CI) and
are stopped at exit. No accounting database: the executor plugin queries job states with squeue, which
shows finished jobs for MinJobAge seconds.

    with local_slurm(folder) as env:   # env: os.environ plus SLURM_CONF (the same path)
        subprocess.run(["sbatch", ...], env=env)
"""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from dlbench.nodes import free_port

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol")
NODES = ("node1", "node2")
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")


def available():
    """None where this machine can run the cluster, else why not."""
    missing = [name for name in DAEMONS if not shutil.which(name) and not Path("/usr/sbin", name).exists()]
    if missing:
        return f"{', '.join(missing)} not installed (Debian: slurm-wlm munge; .ci/run installs them)"
    return None


def slurm_conf(folder, cpus, memory_mb):
    host = socket.gethostname()
    controller = free_port(1 + len(NODES))  # and the nodes' ports after it
    node_ports = [controller + 1 + i for i in range(len(NODES))]
    nodes = "\n".join(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} "
                      f"RealMemory={memory_mb} State=UNKNOWN" for name, port in zip(NODES, node_ports))
    return f"""\
ClusterName=dlbench-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={controller}
SlurmUser={os.environ.get("USER", "root")}
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket
CredType=cred/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool-%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd-%n.pid
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
MinJobAge=600
KillWait=5
{nodes}
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _wait(check, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise RuntimeError(f"the test cluster: {what} within {timeout} s")


@contextlib.contextmanager
def local_slurm(folder, cpus=2, memory_mb=64000):
    folder = Path(folder).resolve()
    (folder / "state").mkdir(parents=True, exist_ok=True)
    # SLURM's own path for it: the executor plugin's job steps drop SLURM_* variables (SLURM_CONF
    # too), so srun inside a job finds the configuration only there; never over a real one.
    conf = SYSTEM_CONF
    if conf.exists():
        raise RuntimeError(f"{conf} exists: this machine has a SLURM of its own; the test cluster would replace it")
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(slurm_conf(folder, cpus, memory_mb))
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started = []

    def start(*command):
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
        started.append(proc)
        return proc

    try:
        start("munged", "--foreground", "--force", f"--key-file={key}", f"--socket={folder}/munge.socket",
              f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log", f"--seed-file={folder}/munge.seed")
        _wait(lambda: (folder / "munge.socket").exists(), "munged made its socket")
        start("slurmctld", "-D", "-i", "-f", str(conf))
        for name in NODES:
            start("slurmd", "-D", "-N", name, "-f", str(conf))

        def nodes_idle():
            out = subprocess.run(["sinfo", "-h", "-o", "%t %D"], env=env, capture_output=True, text=True)
            return out.returncode == 0 and out.stdout.split() == ["idle", str(len(NODES))]

        _wait(nodes_idle, f"{len(NODES)} nodes idle (logs in {folder})")
        yield env
    finally:
        for proc in reversed(started):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(started):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        conf.unlink(missing_ok=True)
