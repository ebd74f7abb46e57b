"""IMDB sentiment LSTM in PyTorch: one device, dense or sparse embedding gradients."""
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dlbench.record import peak_rss_bytes  # noqa: E402
from dlbench.run import epoch_batches, main, resolve_device  # noqa: E402
from parallel import accuracy  # noqa: E402


class SentimentLSTM(nn.Module):
    """Embedding -> one-layer LSTM -> the last step's output -> logits; 772,354 parameters at
    5000,128,128 (cuDNN's two bias vectors per gate, as MXNet; Keras keeps one)."""

    def __init__(self, vocabulary, embedding, hidden, classes, sparse=False):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, embedding, sparse=sparse)
        self.lstm = nn.LSTM(embedding, hidden, batch_first=True)
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, tokens):
        outputs, _ = self.lstm(self.embedding(tokens))
        # The reviews are padded in front, so the last step has read the whole review.
        return self.classifier(outputs[:, -1])


def build_model(model, sparse=False):
    return SentimentLSTM(model["vocabulary"], model["embedding"], model["hidden"], model["classes"], sparse)


class SharedOrderSampler(Sampler):
    """Yields the index batches of the shared epoch order; the loader's workers gather them."""

    def __init__(self, n_samples, batch, seed):
        self.n_samples, self.batch, self.seed, self.epoch = n_samples, batch, seed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        for batch in epoch_batches(self.n_samples, self.batch, self.seed, self.epoch):
            yield batch.tolist()

    def __len__(self):
        return self.n_samples // self.batch


def load_split(spec, split):
    sequences = np.load(spec["data"][f"{split}_sequences"], mmap_mode="r")
    labels = np.load(spec["data"][f"{split}_labels"], mmap_mode="r")
    if sequences.shape[1] != spec["model"]["maxlen"]:
        raise ValueError(f"{split} sequences have {sequences.shape[1]} steps, the model {spec['model']['maxlen']}")
    limit = spec[f"{split}_reviews"] or len(sequences)
    return TensorDataset(torch.from_numpy(np.array(sequences[:limit])),
                         torch.from_numpy(labels[:limit].astype(np.int64)))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_optimizers(model, opt, sparse):
    """Adam, plus SparseAdam for a sparse embedding (Adam rejects sparse gradients); each with
    the study's schedule: the learning rate times lr_factor every lr_step_epochs epochs."""
    kwargs = dict(lr=opt["lr"], betas=(opt["beta1"], opt["beta2"]), eps=opt["eps"])
    if sparse:
        dense_params = [p for name, p in model.named_parameters() if not name.startswith("embedding.")]
        optimizers = [torch.optim.SparseAdam([model.embedding.weight], **kwargs),
                      torch.optim.Adam(dense_params, **kwargs)]
    else:
        optimizers = [torch.optim.Adam(model.parameters(), **kwargs)]
    schedulers = [torch.optim.lr_scheduler.StepLR(o, step_size=opt["lr_step_epochs"], gamma=opt["lr_factor"])
                  for o in optimizers]
    return optimizers, schedulers


def train(run):
    spec = run.spec
    if spec["grad"] not in ("dense", "sparse"):
        raise ValueError(f"grad must be dense or sparse, got {spec['grad']!r}")
    device_kind = resolve_device(spec["device"], torch.cuda.device_count(), 1)
    torch.set_num_threads(spec["threads"])
    device = torch.device("cuda", 0) if device_kind == "gpu" else torch.device("cpu")

    torch.manual_seed(spec["seed"])
    sparse = spec["grad"] == "sparse"
    model = build_model(spec["model"], sparse).to(device)
    optimizers, schedulers = make_optimizers(model, spec["optimizer"], sparse)
    loss_fn = nn.CrossEntropyLoss()

    train_set, test_set = load_split(spec, "train"), load_split(spec, "test")
    sampler = SharedOrderSampler(len(train_set), spec["batch"], spec["seed"])
    # Workers start afresh every epoch, so their start-up is part of the timed epoch, as in the study.
    loader = DataLoader(train_set, batch_sampler=sampler, num_workers=spec["workers"],
                        persistent_workers=False, pin_memory=device_kind == "gpu")
    run.describe(
        framework_version=torch.__version__,
        device={"kind": device_kind, "count": 1,
                "names": [torch.cuda.get_device_name(0)] if device_kind == "gpu" else []},
        threads={"torch_num_threads": torch.get_num_threads(), "loader_workers": spec["workers"]},
        cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version() if device_kind == "gpu" else None,
    )
    for epoch in range(1, spec["epochs"] + 1):
        sampler.set_epoch(epoch)
        lr = optimizers[0].param_groups[0]["lr"]
        start = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for tokens, labels in loader:
            tokens, labels = tokens.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(tokens), labels)
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
            loss_sum += loss.detach()
        synchronize(device)
        wall_s = time.perf_counter() - start
        for scheduler in schedulers:
            scheduler.step()
        eval_start = time.perf_counter()
        test_accuracy = accuracy(model, test_set, device)
        run.epoch(epoch, wall_s, len(sampler) * spec["batch"], loss_sum.item() / len(sampler),
                  metric={"test_accuracy": test_accuracy}, eval_s=time.perf_counter() - eval_start, lr=lr)
    gpu_bytes = torch.cuda.max_memory_allocated(device) if device_kind == "gpu" else None
    run.finish(peak_rss=peak_rss_bytes(), peak_gpu_bytes=gpu_bytes)


def count_parameters(name):
    """name: 'VOCAB,EMBED,HIDDEN' (two classes)."""
    vocabulary, embedding, hidden = (int(x) for x in name.split(","))
    model = build_model({"vocabulary": vocabulary, "embedding": embedding, "hidden": hidden, "classes": 2})
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


if __name__ == "__main__":
    main(train, count_parameters)
