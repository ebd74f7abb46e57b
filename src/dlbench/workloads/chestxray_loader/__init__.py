"""ChestX-ray14's framework loaders without a model, a run set of the chestxray workload (task.py is the part every framework shares)."""
