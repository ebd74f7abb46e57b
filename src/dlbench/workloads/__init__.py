"""The workloads: per workload, its shared part (__init__.py) and one module per framework."""
