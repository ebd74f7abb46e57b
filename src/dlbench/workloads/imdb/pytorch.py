"""IMDB sentiment LSTM in PyTorch: one device, dense or sparse embedding gradients.

Loading: a DataLoader over the training tensors whose sampler yields index tensors
(batch_size=None), so that each fetch, in a worker or in this process, is one vectorised
gather of a whole batch (TensorDataset[indices]). Its workers are persistent and started in
build_training; the run's order is set on the sampler once.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

from dlbench.contract import Steps
from dlbench.frameworks import pytorch as adapter
from dlbench.frameworks.pytorch.step import WorkloadMethods
from dlbench.workloads.imdb.task import Imdb


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
    """model: the spec's LstmModel."""
    return SentimentLSTM(model.vocabulary, model.embedding, model.hidden, model.classes, sparse)


class RunOrder(Sampler):
    """The index batches of the run's order, as index tensors; empty until set_order."""

    def __init__(self):
        self.order = []

    def set_order(self, order):
        self.order = [torch.from_numpy(indices) for indices in order]

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


class PyTorchImdb(WorkloadMethods, Imdb, Steps):
    input_dtype = "int64"

    def build_model(self):
        torch.manual_seed(self.spec.seed)
        self.device = adapter.device(self.placement)
        self.sparse = self.spec.grad == "sparse"
        self.model = build_model(self.spec.model, self.sparse).to(self.device)

    def build_training(self):
        # Mode compile: Dynamo (torch 2.13) leaves nn.LSTM eager, a graph break (its allow_rnn is
        # experimental and off), so only the embedding and the classifier are compiled.
        self.net = adapter.wrap(self.model, self.placement)
        opt = self.spec.optimizer
        kwargs = {"lr": opt.lr, "betas": (opt.beta1, opt.beta2), "eps": opt.eps}
        if self.sparse:  # Adam rejects sparse gradients: SparseAdam for the embedding, Adam for the rest
            dense = [p for name, p in self.model.named_parameters() if not name.startswith("embedding.")]
            self.optimizers = [torch.optim.SparseAdam([self.model.embedding.weight], **kwargs),
                               torch.optim.Adam(dense, **kwargs)]
        else:
            self.optimizers = [torch.optim.Adam(self.model.parameters(), **kwargs)]
        self.loss_fn = nn.CrossEntropyLoss()

        workers = self.spec.workers
        self.sampler = RunOrder()
        train_set = TensorDataset(torch.from_numpy(self.train_sequences), torch.from_numpy(self.train_labels))
        self.loader = DataLoader(train_set, sampler=self.sampler, batch_size=None, num_workers=workers,
                                 persistent_workers=workers > 0, pin_memory=self.placement.device_kind == "gpu")
        if workers > 0:
            iter(self.loader)  # starts the persistent workers now; the sampler is empty, so nothing loads

    def batches(self, order, epochs):
        self.sampler.set_order(order)
        return adapter.on_device(self.loader, self.placement)

    def set_learning_rate(self, lr):
        for optimizer in self.optimizers:
            for group in optimizer.param_groups:
                group["lr"] = lr

    def train_step(self, batch):
        tokens, labels = batch
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=True)
        # Under autocast the embedding stays float32 (its sparse gradients too: SparseAdam's);
        # the LSTM and the classifier compute in the policy's 16-bit type.
        with self.autocast():
            loss = self.loss_fn(self.net(tokens), labels)
        self.backward_step(loss, *self.optimizers)
        return loss.detach()


WORKLOAD = PyTorchImdb
