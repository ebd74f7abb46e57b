"""IMDB sentiment LSTM in MXNet Gluon, fed by a Gluon DataLoader with `workers` worker processes.

Each item of the loader's batch sampler is a whole index batch, which the dataset (numpy
arrays) gathers in one vectorised step, in a worker, or in the training process with 0 workers.

mxnet is imported inside the functions: its thread pools read the thread variables that the
adapter's setup sets, once, at import.
"""
import numpy as np

from dlbench.frameworks import mxnet as adapter
from dlbench.frameworks.mxnet.loaders import data_loader
from dlbench.contract import Steps
from dlbench.frameworks.mxnet.step import WorkloadMethods, make_trainer
from dlbench.workloads.imdb.task import Imdb


def build_model(vocabulary, embedding, hidden, classes):
    """Embedding -> fused one-layer LSTM -> last step -> Dense logits; 772,354 parameters at
    5000,128,128 (Gluon's LSTM has two bias vectors, as PyTorch's)."""
    from mxnet import gluon
    from mxnet.gluon import nn, rnn

    class SentimentLSTM(gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.embedding = nn.Embedding(vocabulary, embedding)
                self.lstm = rnn.LSTM(hidden, layout="NTC", input_size=embedding)
                self.output = nn.Dense(classes, in_units=hidden)

        def hybrid_forward(self, F, tokens):
            steps = self.lstm(self.embedding(tokens))  # (batch, time, hidden)
            # The reviews are padded in front, so the last step has read the whole review.
            return self.output(F.squeeze(F.slice_axis(steps, axis=1, begin=-1, end=None), axis=1))

    return SentimentLSTM()


class IndexBatches:
    """Gluon batch sampler of the run's order: each of its batches is [one index array], which
    an ArrayDataset of numpy arrays gathers in one step (fancy indexing). Lazy: the loader
    takes a batch when it sends one to load (its prefetch ahead of the step), no further."""

    def __init__(self):
        self.order = np.empty((0, 0), dtype=np.int64)

    def __iter__(self):
        return ([batch] for batch in self.order)

    def __len__(self):
        return len(self.order)


def unwrap_batch(data):
    """batchify_fn in the training process: the one gathered batch, as NDArrays."""
    from mxnet import nd

    ((sequences, labels),) = data
    return nd.array(sequences, dtype=sequences.dtype), nd.array(labels, dtype=labels.dtype)


def unwrap_batch_shared(data):
    """batchify_fn in a worker: the one gathered batch, as NDArrays in shared memory (as Gluon's
    default_mp_batchify_fn), which the training process maps instead of copying."""
    import mxnet as mx

    ((sequences, labels),) = data
    shared = mx.Context("cpu_shared", 0)
    return (mx.nd.array(sequences, dtype=sequences.dtype, ctx=shared),
            mx.nd.array(labels, dtype=labels.dtype, ctx=shared))


class MXNetImdb(WorkloadMethods, Imdb, Steps):
    """Under mixed-bfloat16 AMP runs only the Dense layer in bfloat16: its lists keep RNN in float32
    (FP32_FUNCS), so the LSTM, nearly all of the model's FLOPs, runs in float32 and the measured
    precision is float32 (tests/test_precision.py says so)."""

    def build_model(self):
        import mxnet as mx

        self.ctx = adapter.contexts(self.placement)[0]
        mx.random.seed(self.spec.seed)
        m = self.spec.model
        self.model = build_model(m.vocabulary, m.embedding, m.hidden, m.classes)
        self.model.initialize(mx.init.Xavier(), ctx=self.ctx)  # replaced by the shared start (Workload.build)
        self.apply_mode()

    def build_training(self):
        from mxnet import gluon

        self.trainer = make_trainer(self.model.collect_params(), self.spec.optimizer, self.placement,
                                    loss_scaling=self.loss_scaling)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        workers = self.spec.workers
        self.sampler = IndexBatches()
        # Labels as float, as SoftmaxCrossEntropyLoss and argmax's output are in MXNet. The
        # worker pool starts here and is kept for the run's one iteration of the loader.
        dataset = gluon.data.ArrayDataset(self.train_sequences, self.train_labels.astype(np.float32))
        self.loader = data_loader(
            self.placement, dataset, batch_sampler=self.sampler, num_workers=workers,
            batchify_fn=unwrap_batch_shared if workers > 0 else unwrap_batch,
            pin_memory=self.placement.device_kind == "gpu", timeout=max(120, int(self.spec.timeout_s)))

    def batches(self, order, epochs):
        self.sampler.order = order
        return self.loader

    def load_weights(self, weights):
        """Gluon's fused LSTM has PyTorch's layout (gates i, f, g, o; i2h and h2h weights and
        biases): only the names change."""
        import mxnet as mx

        net = self.model
        targets = {
            "embedding.weight": net.embedding.weight,
            "lstm.weight_ih_l0": net.lstm.l0_i2h_weight, "lstm.weight_hh_l0": net.lstm.l0_h2h_weight,
            "lstm.bias_ih_l0": net.lstm.l0_i2h_bias, "lstm.bias_hh_l0": net.lstm.l0_h2h_bias,
            "classifier.weight": net.output.weight, "classifier.bias": net.output.bias,
        }
        if set(weights) != set(targets):
            raise ValueError(f"expected PyTorch's arrays {sorted(targets)}, got {sorted(weights)}")
        for name, param in targets.items():
            if tuple(weights[name].shape) != tuple(param.shape):
                raise ValueError(f"{name} has shape {weights[name].shape}, {param.name} {param.shape}")
            param.set_data(mx.nd.array(weights[name], dtype="float32"))


WORKLOAD = MXNetImdb
