"""ChestX-ray DenseNet-121 in plain PyTorch, as a tutorial writes the loop: the benchmark's
model, batch, threads, optimizer and epochs on one device, random tensors in memory shaped as
the synthetic input (a pool of at most SYNTHETIC_POOL images reused by index, labels of the
training split's size).

Leaves out what the harness adds: its child process and memory sampling, the shared sample
order and synthetic values (torch's RNG here), data parallelism, validation after every
epoch and the final test evaluation, the loss read.

    python src/dlbench/workloads/chestxray/scripts/bare_pytorch.py SPEC_FILE EPOCHS
"""
import json
import sys
import time

import torch
from torch import nn

from dlbench.workloads.chestxray.labels import FINDINGS, read_labels_csv
from dlbench.workloads.chestxray.synthetic import SYNTHETIC_POOL
from dlbench.specs import spec_from_dict
from dlbench.workloads.chestxray.pytorch import build_model


def main():
    with open(sys.argv[1]) as f:
        spec = spec_from_dict(json.load(f))
    epochs = int(sys.argv[2])
    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed)
    device = torch.device("cuda" if spec.device != "cpu" and torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True

    n_train = len(read_labels_csv(spec.data.labels)["train"][0])
    crop = spec.data.crop
    images = torch.randn(min(n_train, SYNTHETIC_POOL), 3, crop, crop)
    labels = torch.randint(0, 2, (n_train, len(FINDINGS))).float()

    model = build_model(spec.model).to(device)
    opt = spec.optimizer
    optimizer = torch.optim.Adam(model.parameters(), lr=opt.lr, betas=(opt.beta1, opt.beta2), eps=opt.eps)
    loss_fn = nn.BCEWithLogitsLoss()
    n_batches = n_train // spec.batch  # the last partial batch is dropped, as in the harness

    model.train()
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        order = torch.randperm(n_train)
        for i in range(n_batches):
            index = order[i * spec.batch:(i + 1) * spec.batch]
            x, y = images[index % len(images)].to(device), labels[index].to(device)
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
