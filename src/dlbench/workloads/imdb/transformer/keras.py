"""IMDB's Transformer encoder classifier in Keras 3 (keras-tensorflow, keras-jax, keras-torch: the same
code), as its users write it: keras.layers.MultiHeadAttention as self-attention with an attention mask
of the real tokens, in the layers of keras.io's "Text classification with Transformer" (a token and
position embedding layer, an encoder block layer; here pre-norm, as PyTorch's reference), a functional
model around them. The rest is the LSTM's workload (imdb/keras.py: the PyDataset loader, Adam, the
schedule, the dtype policy); imdb/transformer/tensorflow.py trains this same model in TensorFlow's loop.
"""
import keras
from keras import layers, ops

from dlbench.frameworks import keras as adapter
from dlbench.workloads.imdb.keras import KerasImdb

PAD = 0  # the token that pads a review in front (imdb/data.py)
LAYER_NORM_EPS = 1e-5  # PyTorch's default; Keras' is 1e-3


class TokenAndPositionEmbedding(layers.Layer):
    """The tokens' embedding plus a learned embedding of their positions (keras.io's layer)."""

    def __init__(self, vocabulary, maxlen, width, **kwargs):
        super().__init__(**kwargs)
        self.token = layers.Embedding(vocabulary, width)
        self.position = layers.Embedding(maxlen, width)

    def call(self, tokens):
        return self.token(tokens) + self.position(ops.arange(ops.shape(tokens)[-1]))


class EncoderLayer(layers.Layer):
    """Pre-norm: x + attention(norm1(x)), then x + feedforward(norm2(x)). MultiHeadAttention scales
    the scores by 1/sqrt(key_dim), key_dim = width / heads, as PyTorch's reference."""

    def __init__(self, width, heads, feedforward, **kwargs):
        super().__init__(**kwargs)
        self.norm1 = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)
        self.attention = layers.MultiHeadAttention(num_heads=heads, key_dim=width // heads)
        self.norm2 = layers.LayerNormalization(epsilon=LAYER_NORM_EPS)
        self.feedforward = keras.Sequential([layers.Dense(feedforward, activation="relu"), layers.Dense(width)])

    def call(self, x, attention_mask):
        normed = self.norm1(x)
        x = x + self.attention(normed, normed, attention_mask=attention_mask)
        return x + self.feedforward(self.norm2(x))


def build_model(model):
    """model: the spec's TransformerModel. The attention mask is (batch, 1, keys), True at the real
    tokens, broadcast over the queries (keras_hub's TransformerEncoder passes its padding mask so): a
    padding query still attends to the real keys, as in PyTorch's reference, and never reaches the
    real tokens' outputs. The mean over the real tokens is GlobalAveragePooling1D with their mask.
    The mean and the logits are float32 under a mixed policy (Keras' mixed-precision guide: the
    model's last layers in float32), as the LSTM's logits; LayerNormalization computes its
    statistics in float32 by itself, and each backend's attention its softmax."""
    tokens = keras.Input((model.maxlen,), dtype="int32")
    real = ops.not_equal(tokens, PAD)
    keys = ops.expand_dims(real, 1)
    x = TokenAndPositionEmbedding(model.vocabulary, model.maxlen, model.width, name="embeddings")(tokens)
    for i in range(model.layers):
        x = EncoderLayer(model.width, model.heads, model.feedforward, name=f"layer_{i}")(x, keys)
    x = layers.LayerNormalization(epsilon=LAYER_NORM_EPS, name="norm")(x)
    pooled = layers.GlobalAveragePooling1D(dtype="float32", name="mean")(x, mask=real)
    return keras.Model(tokens, layers.Dense(model.classes, dtype="float32", name="classifier")(pooled))


def load_weights(model, weights):
    """PyTorch's state dict (imdb/transformer/pytorch.py): Linear weights (out, in) transposed; the
    attention's query/key/value outputs split as (heads, width / heads), contiguous per head as
    PyTorch's view, into Keras' kernels (width, heads, head) and biases (heads, head); the output
    projection's inputs split so, into its kernel (heads, head, width)."""
    embedding = model.get_layer("embeddings")
    embedding.token.set_weights([weights["embedding.weight"]])
    embedding.position.set_weights([weights["position.weight"]])
    encoder = [layer for layer in model.layers if isinstance(layer, EncoderLayer)]
    for i, layer in enumerate(encoder):
        prefix, attention = f"layers.{i}", layer.attention
        heads, head = attention.num_heads, attention.key_dim
        width = heads * head
        for norm, name in ((layer.norm1, "norm1"), (layer.norm2, "norm2")):
            norm.set_weights([weights[f"{prefix}.{name}.weight"], weights[f"{prefix}.{name}.bias"]])
        for dense, name in ((attention.query_dense, "query"), (attention.key_dense, "key"),
                            (attention.value_dense, "value")):
            dense.set_weights([weights[f"{prefix}.attention.{name}.weight"].T.reshape(width, heads, head),
                               weights[f"{prefix}.attention.{name}.bias"].reshape(heads, head)])
        attention.output_dense.set_weights([weights[f"{prefix}.attention.output.weight"].T.reshape(heads, head, width),
                                            weights[f"{prefix}.attention.output.bias"]])
        for dense, index in zip(layer.feedforward.layers, (0, 2)):
            dense.set_weights([weights[f"{prefix}.feedforward.{index}.weight"].T,
                               weights[f"{prefix}.feedforward.{index}.bias"]])
    model.get_layer("norm").set_weights([weights["norm.weight"], weights["norm.bias"]])
    model.get_layer("classifier").set_weights([weights["classifier.weight"].T, weights["classifier.bias"]])


class KerasImdbTransformer(KerasImdb):
    def build_model(self):
        keras.utils.set_random_seed(self.spec.seed)
        with adapter.scope(self.placement), adapter.dtype_policy(self.applied_precision):
            self.model = build_model(self.spec.model)

    def load_weights(self, weights):
        load_weights(self.model, weights)


WORKLOAD = KerasImdbTransformer
