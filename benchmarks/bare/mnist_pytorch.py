"""MNIST in plain PyTorch, as a tutorial writes the loop: the benchmark's model, batch,
threads, optimizer and epochs on one device, the training arrays in memory.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order (torch.randperm here), data parallelism, evaluation after every epoch, the loss read.

    python benchmarks/bare/mnist_pytorch.py SPEC_FILE EPOCHS
"""
import numpy as np
import torch
from torch import nn

from dlbench import bare
from dlbench.workloads.mnist.pytorch import build_model


def main():
    spec, epochs, device = bare.start("pytorch")
    images, labels = bare.training_arrays(spec, "train_images", "train_labels")
    images = torch.from_numpy(np.array(images, dtype=np.float32))
    labels = torch.from_numpy(np.array(labels, dtype=np.int64))

    model = build_model(spec.model.name).to(device)
    opt = spec.optimizer
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)
    loss_fn = nn.CrossEntropyLoss()
    n_batches = len(images) // spec.batch  # the last partial batch is dropped, as in the harness
    clock = bare.EpochClock(n_batches * spec.batch)

    model.train()
    for epoch in range(1, epochs + 1):
        clock.start()
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
        clock.stop(epoch)


if __name__ == "__main__":
    main()
