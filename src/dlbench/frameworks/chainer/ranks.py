"""One process of a chainermn run, started by the adapter's launch under mpiexec:

    mpiexec -n N python -m dlbench.frameworks.chainer.ranks ARGS_FILE

ARGS_FILE (JSON): {"target": "module:function", "args": [...]}; this process calls
target(rank, *args) with its MPI rank. A rank that fails aborts the whole MPI job, so that no
other rank waits forever in a collective.
"""
import importlib
import json
import os
import signal
import sys
import traceback

from dlbench.processes import die_with_parent


def main():
    from mpi4py import MPI

    die_with_parent(signal.SIGTERM)  # the run's processes end with mpiexec's (see dlbench.protocol)
    with open(sys.argv[1]) as f:
        call = json.load(f)
    module, name = call["target"].split(":")
    comm = MPI.COMM_WORLD
    try:
        getattr(importlib.import_module(module), name)(comm.rank, *call["args"])
    except BaseException:
        traceback.print_exc()
        sys.stderr.write(f"chainermn rank {comm.rank} of {comm.size} failed\n")
        sys.stderr.flush()
        comm.Abort(1)
    sys.stdout.flush()
    sys.stderr.flush()
    MPI.Finalize()
    os._exit(0)  # as the protocol: the results are written, nothing is left to finalize


if __name__ == "__main__":
    main()
