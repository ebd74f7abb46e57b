"""ONNX: the trained PyTorch models exported and run in other runtimes."""
