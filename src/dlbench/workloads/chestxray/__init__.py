"""ChestX-ray14, DenseNet (DenseNet-121's architecture, chestxray.blocks) and the image pipeline
(one folder: dlbench.workloads says what it holds; task.py is the part every framework shares)."""
