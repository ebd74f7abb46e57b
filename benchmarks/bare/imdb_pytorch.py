"""IMDB in plain PyTorch, as a tutorial writes the loop: the benchmark's LSTM (dense or
sparse embedding gradients), batch, threads, optimizer, learning-rate schedule and epochs on
one device, the training sequences in memory.

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order (torch.randperm here), the DataLoader and its workers (batches are sliced here in the
training process), evaluation after every epoch, the loss read.

    python benchmarks/bare/imdb_pytorch.py SPEC_FILE EPOCHS
"""
import numpy as np
import torch
from torch import nn

from dlbench import bare
from dlbench.workloads.imdb.pytorch import build_model


def main():
    spec, epochs, device = bare.start("pytorch")
    sequences, labels = bare.training_arrays(spec, "train_sequences", "train_labels")
    sequences = torch.from_numpy(np.array(sequences, dtype=np.int64))
    labels = torch.from_numpy(np.array(labels, dtype=np.int64))

    sparse = spec.grad == "sparse"
    model = build_model(spec.model, sparse).to(device)
    opt = spec.optimizer
    kwargs = {"lr": opt.lr, "betas": (opt.beta1, opt.beta2), "eps": opt.eps}
    if sparse:  # Adam rejects sparse gradients
        rest = [p for name, p in model.named_parameters() if not name.startswith("embedding.")]
        optimizers = [torch.optim.SparseAdam([model.embedding.weight], **kwargs), torch.optim.Adam(rest, **kwargs)]
    else:
        optimizers = [torch.optim.Adam(model.parameters(), **kwargs)]
    schedulers = [torch.optim.lr_scheduler.StepLR(o, step_size=spec.schedule.every_epochs, gamma=spec.schedule.factor)
                  for o in optimizers]
    loss_fn = nn.CrossEntropyLoss()
    n_batches = len(sequences) // spec.batch  # the last partial batch is dropped, as in the harness
    clock = bare.EpochClock(n_batches * spec.batch)

    model.train()
    for epoch in range(1, epochs + 1):
        clock.start()
        order = torch.randperm(len(sequences))
        for i in range(n_batches):
            index = order[i * spec.batch:(i + 1) * spec.batch]
            x, y = sequences[index].to(device), labels[index].to(device)
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        clock.stop(epoch)
        for scheduler in schedulers:
            scheduler.step()


if __name__ == "__main__":
    main()
