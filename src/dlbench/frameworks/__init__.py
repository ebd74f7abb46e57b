"""The frameworks the benchmark knows: the one place they are listed.

A framework is this line, its backend module beside this file (devices, processes, the
device sync: see dlbench.protocol), its env file envs/<name>.yaml, and one module per
workload, dlbench/workloads/<workload>/<name>.py.
"""

# name -> its data-parallel strategies for more than one device (each framework's own engines)
FRAMEWORKS = {
    "pytorch": ("ddp", "dp"),
    "tensorflow": ("mirrored", "multiworker"),
    "mxnet": ("kvstore",),
}
