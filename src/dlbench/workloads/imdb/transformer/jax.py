"""IMDB's Transformer encoder classifier in JAX, as Flax NNX's users write it: nnx.Embed for the tokens
and the positions, nnx.LayerNorm, nnx.MultiHeadAttention with a boolean mask of the real keys,
nnx.Linear; the rest is the LSTM's workload (imdb/jax.py: grain loader, optax Adam, schedule,
precision policy).

Mixed precision as the LSTM's module: every module computes in the policy's dtype (`compute_dtype`;
Flax has no automatic mixed precision) with float32 parameters; nnx.LayerNorm takes its statistics in
float32 whatever its dtype, the attention its scores and softmax in float32 (without dropout,
nnx.MultiHeadAttention calls jax.nn.dot_product_attention, which does), the mean over the real tokens
is summed in float32 and the logits are cast to float32 for the loss.
"""
import jax.numpy as jnp
import numpy as np
from flax import nnx

from dlbench.frameworks.jax.step import abstract, compute_dtype
from dlbench.workloads.imdb.jax import JaxImdb

PAD = 0  # the token that pads a review in front (imdb/data.py)
LAYER_NORM_EPS = 1e-5  # PyTorch's; nnx.LayerNorm defaults to 1e-6


class EncoderLayer(nnx.Module):
    """Pre-norm: x + attention(norm1(x)), then x + feedforward(norm2(x))."""

    def __init__(self, width, heads, feedforward, rngs, dtype=None):
        self.norm1 = nnx.LayerNorm(width, epsilon=LAYER_NORM_EPS, dtype=dtype, rngs=rngs)
        self.attention = nnx.MultiHeadAttention(heads, width, decode=False, dtype=dtype, rngs=rngs)
        self.norm2 = nnx.LayerNorm(width, epsilon=LAYER_NORM_EPS, dtype=dtype, rngs=rngs)
        self.feedforward = nnx.Sequential(nnx.Linear(width, feedforward, dtype=dtype, rngs=rngs), nnx.relu,
                                          nnx.Linear(feedforward, width, dtype=dtype, rngs=rngs))

    def __call__(self, x, keep):
        x = x + self.attention(self.norm1(x), mask=keep)
        return x + self.feedforward(self.norm2(x))


class TransformerClassifier(nnx.Module):
    """Token + position embeddings -> pre-norm encoder layers -> LayerNorm -> the mean over the real
    tokens -> logits; 393,602 parameters at vocabulary 5000, width 64, 2 layers, feed-forward 128,
    100 tokens, as PyTorch's (the attention's kernels are its nn.Linear weights split by head)."""

    def __init__(self, vocabulary, width, heads, layers, feedforward, maxlen, classes, rngs, dtype=None):
        self.embedding = nnx.Embed(vocabulary, width, dtype=dtype, rngs=rngs)
        self.position = nnx.Embed(maxlen, width, dtype=dtype, rngs=rngs)
        self.layers = nnx.List(EncoderLayer(width, heads, feedforward, rngs, dtype) for _ in range(layers))
        self.norm = nnx.LayerNorm(width, epsilon=LAYER_NORM_EPS, dtype=dtype, rngs=rngs)
        self.classifier = nnx.Linear(width, classes, dtype=dtype, rngs=rngs)

    def __call__(self, tokens):
        real = tokens != PAD
        x = self.embedding(tokens) + self.position(jnp.arange(tokens.shape[1]))
        # (batch, heads, queries, keys) as broadcast: a padding query still attends to the real keys
        keep = real[:, None, None, :]
        for layer in self.layers:
            x = layer(x, keep)
        x = self.norm(x)
        weights = real[..., None].astype(x.dtype)
        pooled = jnp.sum(x * weights, axis=1, dtype=jnp.float32) / jnp.maximum(weights.sum(1, dtype=jnp.float32), 1)
        return self.classifier(pooled)


def build_model(model, rngs, dtype=None):
    """model: the spec's TransformerModel; dtype: the computation's (compute_dtype)."""
    return TransformerClassifier(model.vocabulary, model.width, model.heads, model.layers, model.feedforward,
                                 model.maxlen, model.classes, rngs, dtype)


def attention_and_norms(model):
    """{PyTorch's name: (the Flax variable, whether PyTorch's array is transposed)} of what
    torch_to_flax does not load: LayerNorm's weight and bias (scale, bias); the attention's nn.Linear
    projections, weight (out, in), transposed and split by head as nnx.MultiHeadAttention's kernels,
    query/key/value (in, heads, head width) and output (heads, head width, out), their biases likewise
    (PyTorch's heads are the outputs' consecutive slices of head width)."""
    targets, norms = {}, {"norm": model.norm}
    for i, layer in enumerate(model.layers):
        norms.update({f"layers.{i}.norm1": layer.norm1, f"layers.{i}.norm2": layer.norm2})
        attention = layer.attention
        for projection, module in (("query", attention.query), ("key", attention.key),
                                   ("value", attention.value), ("output", attention.out)):
            targets[f"layers.{i}.attention.{projection}.weight"] = (module.kernel, True)
            targets[f"layers.{i}.attention.{projection}.bias"] = (module.bias, False)
    for name, norm in norms.items():
        targets.update({f"{name}.weight": (norm.scale, False), f"{name}.bias": (norm.bias, False)})
    return targets


class JaxImdbTransformer(JaxImdb):
    def build_model(self):
        # no state but parameters (no dropout), every one set by the shared initial weights
        self.model = abstract(lambda: build_model(self.spec.model, nnx.Rngs(self.spec.seed),
                                                  compute_dtype(self.applied_precision)))

    def load_weights(self, weights):
        """The embeddings, the feed-forward blocks and the classifier by torch_to_flax (torch_weights);
        the LayerNorms and the attention, which it does not know, here (attention_and_norms)."""
        targets = attention_and_norms(self.model)
        super().load_weights({name: array for name, array in weights.items() if name not in targets})
        for name, (variable, transposed) in targets.items():
            value = np.asarray(weights[name], dtype=np.float32)
            value = value.T if transposed else value
            variable.set_value(jnp.asarray(value.reshape(variable.get_value().shape)))  # sizes checked

    def torch_weights(self, weights):
        """torch_to_flax reads an attribute `layers` as nnx.Sequential's list, leaving it out of the
        names: PyTorch's 'layers.0.feedforward.0.weight' is its '0.feedforward.0.weight'."""
        return {name.removeprefix("layers."): array for name, array in weights.items()}


WORKLOAD = JaxImdbTransformer
