"""ChestX-ray14's images decoded by an image library without a framework: the chestxray-decode
run set (task.py; runs of no framework)."""
