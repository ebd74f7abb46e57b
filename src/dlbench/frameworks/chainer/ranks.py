"""One process of a chainermn run, started by the adapter's launch under mpiexec:

    mpiexec -n N python -m dlbench.frameworks.chainer.ranks ARGS_FILE

ARGS_FILE (JSON): {"target": "module:function", "args": [...]}; this process calls
target(rank, *args) with its MPI rank. A rank that fails writes its error to
failure_file(ARGS_FILE, rank) and aborts the whole MPI job, so that no other rank waits forever
in a collective (mpiexec may end its output's forwarding before the error reaches it: the file
is what the launch reports).
"""
import importlib
import json
import signal
import sys
import traceback
from pathlib import Path

from dlbench.processes import die_with_parent, end_process


def failure_file(args_file, rank):
    """Where rank `rank` of the launch of ARGS_FILE `args_file` leaves its error."""
    return Path(f"{args_file}.rank{rank}.failed")


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
        error = f"{traceback.format_exc()}chainermn rank {comm.rank} of {comm.size} failed\n"
        sys.stderr.write(error)
        sys.stderr.flush()
        failure_file(sys.argv[1], comm.rank).write_text(error)
        comm.Abort(1)
    MPI.Finalize()
    end_process()  # as the protocol's process


if __name__ == "__main__":
    main()
