"""ChestX-ray14's framework loaders without a model: the chestxray-loader run set (task.py is the
part every framework shares)."""
