"""IMDB's Transformer encoder classifier in MXNet Gluon, from Gluon's layers and MXNet 1.9's fused
self-attention operators; the rest is the LSTM's workload (imdb/mxnet.py: loader, Adam, schedule,
modes, AMP).

The activations are (tokens, batch, width), the fused operators' layout. One Dense projects to the
queries, keys and values interleaved per head (for head h: its query, key, value rows, each
width / heads), which F.contrib.interleaved_matmul_selfatt_qk reads as (tokens, batch, heads, 3,
width / heads): it returns each head's queries times its keys, already scaled by 1/sqrt(width /
heads), as (batch * heads, tokens, tokens), batch-major (src/operator/contrib/transformer.cc). The
padding mask adds 0 at a real key and -1e9 at a padded one before a float32 softmax: exp(-1e9 - max)
is 0 in float32, so each row's weights are those of PyTorch's boolean mask exactly (every review has
a real token; a padded query still attends to the real keys). interleaved_matmul_selfatt_valatt
weighs each head's values by them and returns (tokens, batch, width), the heads side by side as
PyTorch concatenates them. load_weights interleaves PyTorch's separate query, key and value
projections into that one Dense.

mxnet is imported inside the functions (see imdb/mxnet.py).
"""
import numpy as np

from dlbench.frameworks import mxnet as adapter
from dlbench.frameworks.mxnet.step import AMP_DTYPES
from dlbench.workloads.imdb.mxnet import MXNetImdb

PAD = 0  # the token that pads a review in front (imdb/data.py)
LAYER_NORM_EPS = 1e-5
MASKED = -1e9  # added to a padded key's scores: its softmax weight is 0


def build_model(model, attention_in_float32=False):
    """model: the spec's TransformerModel; 393,602 parameters at vocabulary 5000, width 64, 2 layers,
    feed-forward 128, 100 tokens (PyTorch's). attention_in_float32 (mixed-bfloat16): the fused
    operators compute float32 only on a CPU ("Only FP32 is supported on CPU") and AMP's bfloat16
    lists leave them out, so their input is cast back to float32."""
    from mxnet import gluon
    from mxnet.gluon import nn

    width, heads = model.width, model.heads

    class SelfAttention(gluon.HybridBlock):
        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.qkv = nn.Dense(3 * width, flatten=False, in_units=width)
                self.output = nn.Dense(width, flatten=False, in_units=width)

        def hybrid_forward(self, F, x, masked):
            """x (tokens, batch, width); masked (batch * heads, 1, tokens): 0 at a real key, MASKED at padding."""
            qkv = self.qkv(x)
            if attention_in_float32:
                qkv = F.cast(qkv, dtype="float32")
            scores = F.contrib.interleaved_matmul_selfatt_qk(qkv, heads=heads)
            weights = F.softmax(F.broadcast_add(scores, masked), axis=-1)
            return self.output(F.contrib.interleaved_matmul_selfatt_valatt(qkv, weights, heads=heads))

    class EncoderLayer(gluon.HybridBlock):
        """Pre-norm: x + attention(norm1(x)), then x + feedforward(norm2(x))."""

        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.norm1 = nn.LayerNorm(epsilon=LAYER_NORM_EPS, in_channels=width)
                self.attention = SelfAttention()
                self.norm2 = nn.LayerNorm(epsilon=LAYER_NORM_EPS, in_channels=width)
                self.feedforward = nn.HybridSequential()
                self.feedforward.add(nn.Dense(model.feedforward, activation="relu", flatten=False, in_units=width),
                                     nn.Dense(width, flatten=False, in_units=model.feedforward))

        def hybrid_forward(self, F, x, masked):
            x = x + self.attention(self.norm1(x), masked)
            return x + self.feedforward(self.norm2(x))

    class TransformerClassifier(gluon.HybridBlock):
        """Token + position embeddings -> pre-norm encoder layers -> LayerNorm -> the mean over the
        real tokens -> logits."""

        def __init__(self):
            super().__init__()
            with self.name_scope():
                self.embedding = nn.Embedding(model.vocabulary, width)
                self.position = self.params.get("position", shape=(model.maxlen, width))
                self.layers = nn.HybridSequential()
                for _ in range(model.layers):
                    self.layers.add(EncoderLayer())
                self.norm = nn.LayerNorm(epsilon=LAYER_NORM_EPS, in_channels=width)
                self.output = nn.Dense(model.classes, in_units=width)

        def hybrid_forward(self, F, tokens, position):
            tokens = F.transpose(tokens)  # (tokens, batch)
            real = F.cast(tokens != PAD, dtype="float32")
            x = self.embedding(tokens)
            x = F.broadcast_add(x, F.expand_dims(F.slice_like(position, x, axes=(0,)), axis=1))
            # (batch * heads, 1, tokens), the rows of the fused scores (batch-major)
            masked = F.repeat(F.expand_dims(F.transpose(1 - real) * MASKED, axis=1), repeats=heads, axis=0)
            for layer in self.layers:
                x = layer(x, masked)
            x = self.norm(x)
            real = F.expand_dims(real, axis=-1)
            pooled = F.broadcast_div(F.sum(F.broadcast_mul(x, real), axis=0), F.maximum(F.sum(real, axis=0), 1))
            return self.output(pooled)

    return TransformerClassifier()


def interleave(query, key, value, heads):
    """PyTorch's query, key and value weights (width, width) or biases (width,) as the one (3 width, ...)
    the fused operators read: per head, its query rows, then its key rows, then its value rows."""
    per_head = [array.reshape(heads, -1, *array.shape[1:]) for array in (query, key, value)]
    return np.stack(per_head, axis=1).reshape(-1, *query.shape[1:])


class MXNetImdbTransformer(MXNetImdb):
    def build_model(self):
        import mxnet as mx

        self.ctx = adapter.contexts(self.placement)[0]
        mx.random.seed(self.spec.seed)
        self.model = build_model(self.spec.model,
                                 attention_in_float32=AMP_DTYPES.get(self.applied_precision) == "bfloat16")
        self.model.initialize(mx.init.Xavier(), ctx=self.ctx)  # replaced by the shared start (Workload.build)
        self.apply_mode()

    def load_weights(self, weights):
        """PyTorch's names onto the blocks (nn.Dense's weight is (out, in), as nn.Linear's; LayerNorm's
        weight and bias are gamma and beta); each layer's query, key and value interleaved (`interleave`)."""
        import mxnet as mx

        net = self.model
        targets = {"embedding.weight": net.embedding.weight, "position.weight": net.position,
                   "norm.weight": net.norm.gamma, "norm.bias": net.norm.beta,
                   "classifier.weight": net.output.weight, "classifier.bias": net.output.bias}
        interleaved = {}  # the qkv parameter's name: (parameter, PyTorch's query, key, value names)
        for i, layer in enumerate(net.layers):
            prefix = f"layers.{i}."
            for norm in ("norm1", "norm2"):
                targets[f"{prefix}{norm}.weight"] = getattr(layer, norm).gamma
                targets[f"{prefix}{norm}.bias"] = getattr(layer, norm).beta
            for name, dense in (("attention.output", layer.attention.output), ("feedforward.0", layer.feedforward[0]),
                                ("feedforward.2", layer.feedforward[1])):
                targets[f"{prefix}{name}.weight"], targets[f"{prefix}{name}.bias"] = dense.weight, dense.bias
            for kind in ("weight", "bias"):
                param = getattr(layer.attention.qkv, kind)
                interleaved[param.name] = (param, [f"{prefix}attention.{p}.{kind}" for p in ("query", "key", "value")])
        expected = set(targets) | {name for _, names in interleaved.values() for name in names}
        if set(weights) != expected:
            raise ValueError(f"expected PyTorch's arrays {sorted(expected)}, got {sorted(weights)}")
        arrays = [(name, param, weights[name]) for name, param in targets.items()]
        arrays += [(" ".join(names), param, interleave(*(weights[n] for n in names), self.spec.model.heads))
                   for param, names in interleaved.values()]
        for name, param, array in arrays:
            if tuple(array.shape) != tuple(param.shape):
                raise ValueError(f"{name} has shape {array.shape}, {param.name} {param.shape}")
            param.set_data(mx.nd.array(array, dtype="float32"))


WORKLOAD = MXNetImdbTransformer
