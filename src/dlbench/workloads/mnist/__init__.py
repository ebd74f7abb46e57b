"""MNIST, the study's CNNs (one folder: dlbench.workloads says what it holds; task.py is the part every framework shares)."""
