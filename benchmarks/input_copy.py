"""The host's cost per step of one DenseNet-121 batch's input path in PyTorch (ChestX-ray's
synthetic input: a pool of float32 images in host memory, gathered by index each step):

    before  index_select into a new tensor, then pin_memory() (a second copy, into new pinned
            memory), then .to(device) (blocking: the step waits for the copy)
    after   index_select(out=) into one of two reused pinned buffers, then .to(device,
            non_blocking=True) on a side CUDA stream (the copy runs while the step before does)

    PYTHONPATH=src python benchmarks/input_copy.py [--steps 50] [--batch 64] [--crop 224] [--pool 256]

Times each part on the host clock (perf_counter) per step, over --steps steps after 5 warm-up
steps, and prints the median and the range (min-max) per part and for the whole path, as
seconds per step. The copies' host time is the time until .to() returns: blocking for
"before", the enqueueing alone for "after" (the point: what the step's thread pays); "after"
also waits for its buffer's copy of two steps before, which a training step (longer than a
copy) has always finished, and here, with no step between, may not have. Without CUDA only
the gathers can be measured: the pinning and copies are skipped, and it says so.
"""
import argparse
import statistics
import time

import torch


def timed(parts, name, fn):
    start = time.perf_counter()
    result = fn()
    parts.setdefault(name, []).append(time.perf_counter() - start)
    return result


def before(images, index, device, parts):
    """A new tensor, pinned by a copy, copied and waited for."""
    x = timed(parts, "gather (new tensor)", lambda: images.index_select(0, index))
    if device is None:
        return
    x = timed(parts, "pin_memory()", lambda: x.pin_memory())
    timed(parts, ".to(device)", lambda: x.to(device))


def after(images, index, device, parts, buffers, state):
    """The reused buffer, filled in place; on CUDA the copy enqueued on the side stream."""
    step = state["step"]
    out = buffers[step % len(buffers)]
    if device is not None:
        timed(parts, "wait for the buffer's last copy", state["copied"][step % 2].synchronize)
    timed(parts, "gather (out=, reused buffer)", lambda: torch.index_select(images, 0, index, out=out))
    if device is not None:
        def enqueue():
            with torch.cuda.stream(state["side"]):
                on_device = out.to(device, non_blocking=True)
                state["copied"][step % 2].record(state["side"])
            return on_device
        timed(parts, ".to(device, non_blocking) on a side stream", enqueue)
    state["step"] = step + 1


def report(title, parts, skipped):
    print(title)
    totals = [sum(step) for step in zip(*parts.values())]
    for name, values in [*parts.items(), ("whole path", totals)]:
        print(f"  {name:45s} median {statistics.median(values) * 1e3:8.3f} ms "
              f"(range {min(values) * 1e3:.3f}-{max(values) * 1e3:.3f}) over {len(values)} steps")
    for name, why in skipped:
        print(f"  {name:45s} skipped: {why}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--crop", type=int, default=224)
    parser.add_argument("--pool", type=int, default=256, help="images in the host pool (SYNTHETIC_POOL)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda") if cuda else None
    skipped = [] if cuda else [(part, "no CUDA device: nothing to pin for or copy to")
                               for part in ("pin_memory() / pinned buffers", ".to(device)")]
    images = torch.randn(args.pool, 3, args.crop, args.crop)
    generator = torch.Generator().manual_seed(0)
    indices = [torch.randint(0, args.pool, (args.batch,), generator=generator) for _ in range(args.steps + 5)]
    print(f"input path of one batch: {args.batch} x 3 x {args.crop} x {args.crop} float32 "
          f"({args.batch * 3 * args.crop ** 2 * 4 / 2 ** 20:.1f} MiB) from a pool of {args.pool}, "
          f"{'CUDA ' + torch.cuda.get_device_name() if cuda else 'CPU only'}, torch {torch.__version__}")

    warm = {}
    for index in indices[:5]:
        before(images, index, device, warm)
    parts = {}
    for index in indices[5:]:
        before(images, index, device, parts)
    report("before: index_select, pin_memory(), .to(device)", parts, skipped)

    pin = dict(pin_memory=True) if cuda else {}
    buffers = [torch.empty(args.batch, 3, args.crop, args.crop, **pin) for _ in range(2)]
    state = {"step": 0, "side": torch.cuda.Stream() if cuda else None,
             "copied": [torch.cuda.Event(), torch.cuda.Event()] if cuda else None}
    warm = {}
    for index in indices[:5]:
        after(images, index, device, warm, buffers, state)
    parts = {}
    for index in indices[5:]:
        after(images, index, device, parts, buffers, state)
    if cuda:
        torch.cuda.synchronize()
    report("after: index_select(out=) into a reused buffer"
           + (", pinned, copied on a side stream" if cuda else ""), parts, skipped)


if __name__ == "__main__":
    main()
