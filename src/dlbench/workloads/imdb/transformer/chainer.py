"""IMDB's Transformer encoder classifier in Chainer, from Chainer's own operators as its users write
it: L.EmbedID and a position Parameter, L.LayerNormalization and L.Linear on (batch * tokens, width)
rows, attention as F.matmul over (batch * heads, tokens, head width) with F.where masking the
padding keys before F.softmax; the rest is the LSTM's workload (imdb/chainer.py: iterator, Adam,
schedule, mixed16). Under mixed16 every link is float16, LayerNormalization's too (Chainer keeps
float32 parameters for batch normalisation only).
"""
import math

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
from chainer import initializers

from dlbench.frameworks import chainer as adapter
from dlbench.frameworks.chainer.step import assign
from dlbench.workloads.imdb.chainer import ChainerImdb

PAD = 0  # the token that pads a review in front (imdb/data.py)
LAYER_NORM_EPS = 1e-5  # PyTorch's; Chainer's LayerNormalization defaults to 1e-6


class SelfAttention(chainer.Chain):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        with self.init_scope():
            self.query, self.key, self.value, self.output = (L.Linear(width, width) for _ in range(4))

    def forward(self, x, tokens, keep):
        """x (batch * tokens, width); keep (batch * heads, 1, tokens): True where a key is a real
        token (a padding query still attends to the real keys)."""
        width = x.shape[1]
        head_width = width // self.heads

        def split(projection):  # (batch * heads, tokens, head_width)
            y = F.reshape(projection(x), (-1, tokens, self.heads, head_width))
            return F.reshape(F.transpose(y, (0, 2, 1, 3)), (-1, tokens, head_width))

        scores = F.matmul(split(self.query), split(self.key), transb=True) * (1 / math.sqrt(head_width))
        fill = self.xp.array(np.finfo(scores.dtype).min, dtype=scores.dtype)  # float16's under mixed16
        attended = F.matmul(F.softmax(F.where(keep, scores, fill), axis=2), split(self.value))
        attended = F.transpose(F.reshape(attended, (-1, self.heads, tokens, head_width)), (0, 2, 1, 3))
        return self.output(F.reshape(attended, (-1, width)))


class EncoderLayer(chainer.Chain):
    """Pre-norm: x + attention(norm1(x)), then x + feedforward(norm2(x))."""

    def __init__(self, width, heads, feedforward):
        super().__init__()
        with self.init_scope():
            self.norm1 = L.LayerNormalization(width, eps=LAYER_NORM_EPS)
            self.attention = SelfAttention(width, heads)
            self.norm2 = L.LayerNormalization(width, eps=LAYER_NORM_EPS)
            self.feedforward = chainer.Sequential(L.Linear(width, feedforward), F.relu, L.Linear(feedforward, width))

    def forward(self, x, tokens, keep):
        x = x + self.attention(self.norm1(x), tokens, keep)
        return x + self.feedforward(self.norm2(x))


class TransformerClassifier(chainer.Chain):
    """Token + position embeddings -> pre-norm encoder layers -> LayerNorm -> the mean over the real
    tokens -> logits; 393,602 parameters at vocabulary 5000, width 64, 2 layers, feed-forward 128,
    100 tokens (PyTorch's: L.Linear's W is (out, in) as nn.Linear's weight)."""

    def __init__(self, vocabulary, width, heads, layers, feedforward, maxlen, classes):
        super().__init__()
        self.heads = heads
        with self.init_scope():
            self.embedding = L.EmbedID(vocabulary, width)
            self.position = chainer.Parameter(initializers.Normal(1.0), (maxlen, width))
            self.layers = chainer.ChainList(*(EncoderLayer(width, heads, feedforward) for _ in range(layers)))
            self.norm = L.LayerNormalization(width, eps=LAYER_NORM_EPS)
            self.classifier = L.Linear(width, classes)

    def forward(self, tokens):
        batch, length = tokens.shape
        real = tokens != PAD
        keep = self.xp.repeat(real, self.heads, axis=0)[:, None, :]  # rows b * heads + h, as split() orders them
        x = self.embedding(tokens) + self.position[:length]
        x = F.reshape(x, (batch * length, -1))  # rows for LayerNormalization and Linear
        for layer in self.layers:
            x = layer(x, length, keep)
        x = F.reshape(self.norm(x), (batch, length, -1))
        weights = real[:, :, None].astype(x.dtype)
        counts = self.xp.maximum(weights.sum(axis=1), 1)
        return self.classifier(F.sum(x * weights, axis=1) / counts)


def build_model(model):
    """model: the spec's TransformerModel."""
    return TransformerClassifier(model.vocabulary, model.width, model.heads, model.layers, model.feedforward,
                                 model.maxlen, model.classes)


def pytorch_names(model):
    """{PyTorch's state-dict name (imdb/transformer/pytorch.py): the Chainer Parameter}: LayerNorm's
    weight and bias are gamma and beta, nn.Linear's weight and bias W and b (the same layout)."""
    names = {"embedding.weight": model.embedding.W, "position.weight": model.position}

    def norm(name, link):
        names.update({f"{name}.weight": link.gamma, f"{name}.bias": link.beta})

    def linear(name, link):
        names.update({f"{name}.weight": link.W, f"{name}.bias": link.b})

    for i, layer in enumerate(model.layers):
        norm(f"layers.{i}.norm1", layer.norm1)
        for projection in ("query", "key", "value", "output"):
            linear(f"layers.{i}.attention.{projection}", getattr(layer.attention, projection))
        norm(f"layers.{i}.norm2", layer.norm2)
        linear(f"layers.{i}.feedforward.0", layer.feedforward[0])
        linear(f"layers.{i}.feedforward.2", layer.feedforward[2])
    norm("norm", model.norm)
    linear("classifier", model.classifier)
    return names


class ChainerImdbTransformer(ChainerImdb):
    def build_model(self):
        np.random.seed(self.spec.seed)  # Chainer's initializers draw from numpy's global generator
        self.model = build_model(self.spec.model)
        self.model.to_device(adapter.device(self.placement))

    def load_weights(self, weights):
        targets = pytorch_names(self.model)
        if set(weights) != set(targets):
            raise ValueError(f"expected PyTorch's arrays {sorted(targets)}, got {sorted(weights)}")
        for name, parameter in targets.items():
            assign(parameter, weights[name], name)


WORKLOAD = ChainerImdbTransformer
