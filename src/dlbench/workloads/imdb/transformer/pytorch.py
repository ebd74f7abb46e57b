"""IMDB's Transformer encoder classifier in PyTorch, as its users write it: nn.Linear projections and
F.scaled_dot_product_attention with a boolean mask of the real tokens; the rest is the LSTM's
workload (imdb/pytorch.py: loader, Adam, schedule, autocast).

This module's state dict is the reference layout of the shared initial weights
(imdb/definition.py, draw_transformer_weights): every other framework loads these names.
"""
import torch
from torch import nn
from torch.nn import functional as F

from dlbench.workloads.imdb.pytorch import PyTorchImdb

PAD = 0  # the token that pads a review in front (imdb/data.py)
LAYER_NORM_EPS = 1e-5


class SelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value, self.output = (nn.Linear(width, width) for _ in range(4))

    def forward(self, x, keep):
        """x (batch, tokens, width); keep (batch, 1, 1, tokens): True where a key is a real token."""
        batch, tokens, width = x.shape

        def split(projection):  # (batch, heads, tokens, width / heads)
            return projection(x).view(batch, tokens, self.heads, width // self.heads).transpose(1, 2)

        attended = F.scaled_dot_product_attention(split(self.query), split(self.key), split(self.value), attn_mask=keep)
        return self.output(attended.transpose(1, 2).reshape(batch, tokens, width))


class EncoderLayer(nn.Module):
    """Pre-norm: x + attention(norm1(x)), then x + feedforward(norm2(x))."""

    def __init__(self, width, heads, feedforward):
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.attention = SelfAttention(width, heads)
        self.norm2 = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.feedforward = nn.Sequential(nn.Linear(width, feedforward), nn.ReLU(), nn.Linear(feedforward, width))

    def forward(self, x, keep):
        x = x + self.attention(self.norm1(x), keep)
        return x + self.feedforward(self.norm2(x))


class TransformerClassifier(nn.Module):
    """Token + position embeddings -> pre-norm encoder layers -> LayerNorm -> the mean over the real
    tokens -> logits; 393,602 parameters at vocabulary 5000, width 64, 2 layers, feed-forward 128,
    100 tokens."""

    def __init__(self, vocabulary, width, heads, layers, feedforward, maxlen, classes):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width)
        self.position = nn.Embedding(maxlen, width)
        self.layers = nn.ModuleList(EncoderLayer(width, heads, feedforward) for _ in range(layers))
        self.norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.classifier = nn.Linear(width, classes)

    def forward(self, tokens):
        real = tokens != PAD
        x = self.embedding(tokens) + self.position.weight[:tokens.shape[1]]
        for layer in self.layers:
            x = layer(x, real[:, None, None, :])
        x = self.norm(x)
        weights = real.unsqueeze(-1).to(x.dtype)
        pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1)
        return self.classifier(pooled)


def build_model(model):
    """model: the spec's TransformerModel."""
    return TransformerClassifier(model.vocabulary, model.width, model.heads, model.layers, model.feedforward,
                                 model.maxlen, model.classes)


class PyTorchImdbTransformer(PyTorchImdb):
    def build_model(self):
        torch.manual_seed(self.spec.seed)
        self.device = self.adapter.device(self.placement)
        self.sparse = False
        self.model = build_model(self.spec.model).to(self.device)


WORKLOAD = PyTorchImdbTransformer
