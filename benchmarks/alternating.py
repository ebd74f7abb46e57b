"""Would interleaving cancel this machine's noise? One PyTorch process trains two models (MNIST's
small CNN at two widths) in alternating units of 5 steps for --seconds, and prints each model's CV
between units, the CV of the ratio of adjacent units and the correlation of adjacent units. Run it
a few times: the ratio's mean from process to process is the part that no interleaving within a
process removes.

~/.cache/dlbench/venvs/pytorch-*/bin/python benchmarks/alternating.py --seconds 30"""
import argparse, time
import numpy as np
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=30)
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)


def model(width):
    m = torch.nn.Sequential(torch.nn.Conv2d(1, width, 3), torch.nn.ReLU(), torch.nn.Conv2d(width, 64, 3), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(9216, 128), torch.nn.ReLU(),
                            torch.nn.Linear(128, 10))
    return m, torch.optim.Adam(m.parameters())


x, y = torch.randn(256, 1, 28, 28), torch.randint(0, 10, (256,))


def unit(subject, steps):
    m, opt = subject
    start = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
    return time.perf_counter() - start


a_model, b_model = model(32), model(16)
unit(a_model, 3), unit(b_model, 3)
a, b = [], []
end = time.time() + args.seconds
while time.time() < end:
    a.append(unit(a_model, 5))
    b.append(unit(b_model, 5))
a, b = np.array(a), np.array(b)
cv = lambda v: v.std(ddof=1) / v.mean()
print(f"{len(a)} unit pairs: A {a.mean():.3f} s (CV {cv(a):.1%}), B {b.mean():.3f} s (CV {cv(b):.1%}), "
      f"A / B {np.mean(a / b):.3f} (CV {cv(a / b):.1%}), adjacent units' correlation {np.corrcoef(a, b)[0, 1]:+.2f}")
