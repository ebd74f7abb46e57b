"""The FLOPs of a training step are counted once (dlbench.flops, each workload's definition) and
checked: MNIST small by hand, every model against PyTorch's own counter
(torch.utils.flop_counter) on its PyTorch module, forward and backward."""
import json
import subprocess

import pytest

from dlbench.definitions import run_set
from dlbench.specs import spec_to_json
from conftest import venv_python
from specs import smoke_spec

# MNIST small by hand, per image: conv 1->32 3x3 at 28x28: 2*9*32*784 = 451,584; linear
# 6272->64: 802,816; linear 64->10: 1,280. Forward 1,255,680; the weight gradients as much again;
# the input gradients of the two linear layers (not of the images) 804,096.
MNIST_SMALL_BY_HAND = 2 * (451_584 + 802_816 + 1_280) + (802_816 + 1_280)

# Run in the PyTorch environment: the FLOPs PyTorch's counter sees in one step of BATCH samples.
COUNT = """
import json, sys
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode
from dlbench.specs import spec_from_dict

spec = spec_from_dict(json.loads(sys.argv[1]))
BATCH = 2
if spec.run_set == "mnist":
    from dlbench.workloads.mnist.pytorch import build_model
    model, inputs, classes = build_model(spec.model.name), torch.randn(BATCH, 1, 28, 28), 10
elif spec.run_set == "chestxray":
    from dlbench.workloads.chestxray.pytorch import build_model
    model, classes = build_model(spec.model), spec.model.classes
    inputs = torch.randn(BATCH, 3, spec.data.crop, spec.data.crop)
else:  # nn.LSTM runs as one fused op the counter does not see: the same LSTM, step by step
    from dlbench.workloads.imdb.pytorch import build_model
    net, m = build_model(spec.model), spec.model
    lstm = net.lstm

    def model(tokens):
        x = net.embedding(tokens)
        h = c = torch.zeros(len(tokens), m.hidden)  # the first state, zeros: it needs no gradient
        for t in range(m.maxlen):
            gates = F.linear(x[:, t], lstm.weight_ih_l0, lstm.bias_ih_l0) + F.linear(h, lstm.weight_hh_l0, lstm.bias_hh_l0)
            i, f, g, o = gates.chunk(4, dim=1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return net.classifier(h)
    inputs, classes = torch.randint(0, m.vocabulary, (BATCH, m.maxlen)), m.classes
with FlopCounterMode(display=False) as counter:
    logits = model(inputs)
    F.cross_entropy(logits, torch.randint(0, classes, (BATCH,))).backward()
print(json.dumps(counter.get_total_flops() / BATCH))
"""


def pytorch_count(spec):
    proc = subprocess.run([venv_python("pytorch"), "-c", COUNT, spec_to_json(spec)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def count(spec):
    return run_set(spec.run_set).flops(spec)


def test_mnist_small_is_the_count_by_hand():
    assert count(smoke_spec("mnist", "pytorch", model="small")) == MNIST_SMALL_BY_HAND == 3_315_456


@pytest.mark.slow  # PyTorch's environment
@pytest.mark.parametrize("workload, row", [("mnist", {"model": "small"}), ("mnist", {"model": "large"}),
                                           ("imdb", {}), ("chestxray", {})])
def test_each_model_is_what_pytorchs_counter_counts(workload, row):
    spec = smoke_spec(workload, "pytorch", **row)
    assert count(spec) == pytorch_count(spec)
