"""ChestX-ray14, DenseNet-121 and the image pipeline (one folder: dlbench.workloads says what it holds; task.py is the part every framework shares)."""
