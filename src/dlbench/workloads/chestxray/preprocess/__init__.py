"""ChestX-ray14's source images resized and written by an image library: the
chestxray-preprocess run set (task.py; runs of no framework)."""
