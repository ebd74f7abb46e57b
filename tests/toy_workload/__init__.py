"""The toy workload (task.py is the part every framework shares)."""
