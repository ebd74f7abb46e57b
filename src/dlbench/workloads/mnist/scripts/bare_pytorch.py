"""MNIST in plain PyTorch, as a tutorial writes the loop: the benchmark's model, batch,
threads, optimizer and epochs on one device, the training arrays in memory.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order (torch.randperm here), data parallelism, evaluation after every epoch, the loss read.

    python src/dlbench/workloads/mnist/scripts/bare_pytorch.py SPEC_FILE EPOCHS
"""
import json
import sys
import time

import numpy as np
import torch
from torch import nn

from dlbench.frameworks.pytorch import gpu_float32
from dlbench.specs import spec_from_dict
from dlbench.workloads.mnist.pytorch import build_model


def main():
    with open(sys.argv[1]) as f:
        spec = spec_from_dict(json.load(f))
    epochs = int(sys.argv[2])
    torch.set_num_threads(spec.threads)
    gpu_float32(spec.gpu_float32)  # the run's float32 policy on GPUs, set as the harness's backend sets it
    torch.manual_seed(spec.seed)
    device = torch.device("cuda" if spec.device != "cpu" and torch.cuda.is_available() else "cpu")

    limit = spec.data.train_limit
    images = torch.from_numpy(np.array(np.load(spec.data.train_images, mmap_mode="r")[:limit], dtype=np.float32))
    labels = torch.from_numpy(np.array(np.load(spec.data.train_labels, mmap_mode="r")[:limit], dtype=np.int64))

    model = build_model(spec.model.name).to(device)
    opt = spec.optimizer
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)
    loss_fn = nn.CrossEntropyLoss()
    n_batches = len(images) // spec.batch  # the last partial batch is dropped, as in the harness

    model.train()
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        order = torch.randperm(len(images))
        for i in range(n_batches):
            index = order[i * spec.batch:(i + 1) * spec.batch]
            x, y = images[index].to(device), labels[index].to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall_s = time.perf_counter() - start
        print(json.dumps({"epoch": epoch, "wall_s": wall_s, "samples": n_batches * spec.batch}), flush=True)


if __name__ == "__main__":
    main()
