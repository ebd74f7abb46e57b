"""PyTorch's adapter: devices, processes and the device sync (the contract: dlbench.contract).

Strategies: "none" (one device), "ddp" (DistributedDataParallel, one process per device,
gloo on CPUs, nccl on GPUs; across nodes through torchrun's env:// rendezvous, dlbench.nodes)
and "dp" (DataParallel, one process driving every GPU).

Modes (a run's spec.mode, dlbench.frameworks): "eager"; "compile", torch.compile (inductor) of
the forward and backward, the optimizer eager; "channels-last", eager with the model and its 4-D
input batches in the channels-last (NHWC) memory format (the CNNs); "checkpoint", eager with
activation checkpointing (torch.utils.checkpoint) of each DenseNet dense layer's bottleneck, which
the ChestX-ray module's DenseLayer applies (no other workload has one: dlbench.frameworks.without_recomputing).
wrap() applies a mode to the model, on_device() to the batches: the workload modules only call them.

Precision (dlbench.precision): the mixed policies run the forward pass and the loss under
torch.autocast (bfloat16 or float16, on the run's device type), float16 with a GradScaler's
dynamic loss scaling (step.py: `autocast`, `grad_scaler`, WorkloadMethods.backward_step); float32
enters no autocast context at all. The proof reads the aten ops that dispatched (`forward_ops`).
"""
import datetime
import os
import re

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.flop_counter import flop_registry

from dlbench import precision
from dlbench.frameworks import reported
from dlbench.nodes import devices_per_node, free_port, this_node
from dlbench.processes import end_process
from dlbench.numerics import denormals, flushed
from dlbench.contract import Placement, one_ahead, verify_adapter
from dlbench.frameworks.pytorch.internals import TorchDispatchMode, tree_leaves
from dlbench.errors import NotApplicable

COMPILE, CHANNELS_LAST, CHECKPOINT = "compile", "channels-last", "checkpoint"
COMPILE_BACKEND = "inductor"  # torch.compile's default: C++/OpenMP kernels on CPUs (g++), Triton on GPUs


def version():
    return torch.__version__


def visible_gpus():
    return torch.cuda.device_count()


def check(spec, device_kind):
    if spec.strategy == "dp" and device_kind != "gpu":
        raise NotApplicable("DataParallel runs on GPUs only; this run has none")
    if (spec.precision == "mixed-bfloat16" and device_kind == "gpu"
            and not torch.cuda.is_bf16_supported(including_emulation=False)):
        raise NotApplicable("precision mixed-bfloat16: this GPU has no bfloat16 arithmetic (compute capability "
                            "below 8.0), where autocast refuses bfloat16")


def cudnn_autotune(on):
    torch.backends.cudnn.benchmark = on  # off as PyTorch ships
    return {"torch.backends.cudnn.benchmark": torch.backends.cudnn.benchmark}


def gpu_float32(policy):
    """Full float32 (IEEE) or TF32 in cuBLAS' matrix products and cuDNN's convolutions and RNNs
    (PyTorch ships with TF32 in cuDNN's convolutions only), through the fp32_precision settings
    (PyTorch >= 2.9; mixing them with the older allow_tf32 flags is an error)."""
    precision = {"highest": "ieee", "tf32": "tf32"}[policy]
    settings = {"cuda.matmul": torch.backends.cuda.matmul, "cudnn.conv": torch.backends.cudnn.conv,
                "cudnn.rnn": torch.backends.cudnn.rnn}
    for setting in settings.values():
        setting.fp32_precision = precision
    return {f"torch.backends.{name}.fp32_precision": setting.fp32_precision for name, setting in settings.items()}


def compile_cache(directory):
    """torch.compile's caches (Inductor's FX graphs and kernels, Triton's on GPUs), read when
    Inductor loads (as PyTorch ships, /tmp/torchinductor_<user>, shared by every run ever made)."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(directory)
    os.environ["TRITON_CACHE_DIR"] = os.path.join(directory, "triton")
    return {name: os.environ[name] for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}


def float32_product(a, b, placement):
    target = device(placement)
    return (torch.from_numpy(a).to(target) @ torch.from_numpy(b).to(target)).cpu().numpy()


def launch(spec, target, args):
    """target(local rank, *args) here (none, dp, a ddp run of one device per node), or in one
    spawned process per device of this node (ddp). A ddp run's processes meet at the rendezvous
    that torchrun's env:// uses (MASTER_ADDR, MASTER_PORT): node 0's, or a free port here."""
    if spec.strategy == "ddp" and spec.devices > 1:
        node = this_node(spec)
        os.environ.update(MASTER_ADDR=node.address, MASTER_PORT=str(node.port or free_port()))
        if devices_per_node(spec) > 1:
            mp.spawn(spawned_rank, args=(target, args), nprocs=devices_per_node(spec))
            return
    target(0, *args)


def spawned_rank(local_rank, target, args):
    """One spawned process of a ddp run: target, then the end of every run's process (the
    protocol's own ends the same way, dlbench.processes.end_process). An exception is mp.spawn's:
    it reports it and exits 1."""
    target(local_rank, *args)
    end_process()


def setup(spec, device_kind, local_rank):
    ddp = spec.strategy == "ddp"
    node = this_node(spec)
    local_processes = devices_per_node(spec) if ddp else 1
    processes = spec.devices if ddp else 1
    rank = node.global_rank(local_rank, local_processes)
    threads = max(1, node.threads // local_processes)
    if spec.numerics == "flush":
        torch.set_flush_denormal(True)  # PyTorch's own idiom; dlbench.numerics has already set the same bits
    torch.set_num_threads(threads)
    if device_kind == "gpu":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if processes > 1:
        dist.init_process_group("nccl" if device_kind == "gpu" else "gloo", init_method="env://", rank=rank,
                                world_size=processes, timeout=datetime.timedelta(seconds=spec.timeout_s))
    return Placement(rank=rank, processes=processes, device_kind=device_kind,
                     local_devices=spec.devices if spec.strategy == "dp" else 1, threads=threads,
                     handles={"device": device, "strategy": spec.strategy, "mode": spec.mode})


def device(placement):
    return placement.handles["device"]


def wrap(model, placement):
    """The model (on its device, its start loaded) as the run's steps call it: in the mode's
    memory format, wrapped for its strategy (DDP, DataParallel, or as is), then compiled in mode
    compile. torch.compile goes outside DDP, as PyTorch's DDP docs advise: its DDPOptimizer
    splits the graph at the gradient buckets, so their all-reduce still overlaps the backward.
    The model itself stays the plain module (predictions, weights, the ONNX export)."""
    mode = placement.handles["mode"]
    if mode == CHANNELS_LAST:
        model.to(memory_format=torch.channels_last)  # in place: the optimizer gets these parameters
    net = model
    if placement.handles["strategy"] == "ddp":
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[placement.handles["device"]] if placement.device_kind == "gpu" else None)
    elif placement.handles["strategy"] == "dp":
        net = nn.DataParallel(model, device_ids=list(range(placement.local_devices)))
    return torch.compile(net, backend=COMPILE_BACKEND) if mode == COMPILE else net


def to_device(batch, placement):
    """A host batch (a tuple of tensors) on the run's device, asynchronously where it is pinned
    (non_blocking); in mode channels-last, 4-D image batches in that memory format, converted
    here, on their way to the device, in every workload. The one place where a batch leaves the
    host (tests/test_inputs.py counts it)."""
    target = device(placement)
    channels_last = placement.handles["mode"] == CHANNELS_LAST
    return tuple(tensor.to(target, non_blocking=True,
                           memory_format=torch.channels_last if channels_last and tensor.dim() == 4
                           else torch.preserve_format)
                 for tensor in batch)


def on_device(batches, placement):
    """Host batches (tuples of tensors) on the run's device as they are iterated (nothing loads
    before): on a CPU each as it comes (to_device: nothing to copy); on a GPU copied one batch
    ahead, while the step before it runs (`copied_ahead`)."""
    if placement.device_kind == "gpu":
        yield from copied_ahead(batches, placement)
        return
    for batch in batches:
        yield to_device(batch, placement)


def copied_ahead(batches, placement, copied=None):
    """On a GPU, as NVIDIA Apex's data_prefetcher: when batch i is handed to its step, batch i+1
    is already queued for the device on a side stream, so that its copy runs while step i
    computes. The step's stream waits for its own batch's copy only (its event), and
    record_stream tells the caching allocator that the step's stream uses the batch, so that its
    memory goes to no later copy before the step is done. copied(event), if given, is told the
    event of each batch's copy as soon as it is queued (a caller refilling its pinned host
    buffers waits for it: `gathered`)."""
    stream = torch.cuda.Stream(device(placement))

    def queue(batch):
        with torch.cuda.stream(stream):
            moved = to_device(batch, placement)
        done = stream.record_event()
        if copied is not None:
            copied(done)
        return moved, done

    for moved, done in one_ahead(queue(batch) for batch in batches):
        yield _handed(moved, done)


def _handed(batch, copied):
    """A batch copied on the side stream, for the current stream's step (copied_ahead)."""
    step_stream = torch.cuda.current_stream()
    step_stream.wait_event(copied)
    for tensor in batch:
        tensor.record_stream(step_stream)
    return batch


class _PinnedGather:
    """Host batches gathered by index into two reused pinned buffers (index_select(out=...): no
    allocation and no pinning per step), for copied_ahead. A buffer is refilled only once its
    last copy to the device is done (that copy's event): the host runs at most two batches ahead
    of the copies, which run ahead of the steps anyway."""

    SLOTS = 2

    def __init__(self, tensors, indices):
        self.tensors, self.indices = tensors, indices
        self.buffers = [tuple(torch.empty((len(index[0]), *tensor.shape[1:]), dtype=tensor.dtype, pin_memory=True)
                              for tensor, index in zip(tensors, indices)) for _ in range(self.SLOTS)]
        self.copies = [None] * self.SLOTS
        self.slot = None

    def __iter__(self):
        for step in range(len(self.indices[0])):
            self.slot = step % self.SLOTS
            if self.copies[self.slot] is not None:
                self.copies[self.slot].synchronize()
            yield tuple(torch.index_select(tensor, 0, index[step], out=out)
                        for tensor, index, out in zip(self.tensors, self.indices, self.buffers[self.slot]))

    def copied(self, event):
        self.copies[self.slot] = event


def gathered(tensors, indices, placement):
    """Batches gathered by index from host tensors, on the run's device (synthetic input): step
    i takes tensors[k].index_select(0, indices[k][i]) of each tensor k (indices: int64 arrays
    (steps, batch), one a tensor). Made here, outside the clock; gathered as iterated. On a
    CPU, a fresh gather each step, nothing pinned, no stream (to_device keeps it where it is).
    On a GPU, gathered into reused pinned buffers (`_PinnedGather`, allocated here) and copied
    one batch ahead on a side stream (`copied_ahead`)."""
    indices = [torch.from_numpy(index) for index in indices]
    if placement.device_kind != "gpu":
        return (to_device(tuple(tensor.index_select(0, index[step]) for tensor, index in zip(tensors, indices)),
                          placement)
                for step in range(len(indices[0])))
    host = _PinnedGather(tensors, indices)
    return copied_ahead(host, placement, copied=host.copied)


def resident(tensors, indices, placement):
    """Batches gathered by index on the device (`device` input: the compute-only bound): the
    tensors and every step's indices (as `gathered` takes them) are put on the run's device
    once, here, outside the clock; step i gathers its batch there (index_select on device
    tensors), and nothing leaves the host inside a step. In mode channels-last the 4-D batches
    are converted on the device (index_select returns them contiguous)."""
    target = device(placement)
    tensors = [tensor.to(target) for tensor in tensors]
    steps = [torch.from_numpy(index).to(target).unbind(0) for index in indices]
    channels_last = placement.handles["mode"] == CHANNELS_LAST

    def batch(step):
        gathered = (tensor.index_select(0, index[step]) for tensor, index in zip(tensors, steps))
        return tuple(t.contiguous(memory_format=torch.channels_last) if channels_last and t.dim() == 4 else t
                     for t in gathered)

    return (batch(step) for step in range(len(indices[0])))


def barrier(placement):
    if placement.processes > 1:
        dist.barrier()


def sync(placement, pending):
    if placement.device_kind == "gpu":
        torch.cuda.synchronize(device(placement))
    barrier(placement)


def to_float(value):
    return float(value.item())


def mean_over_processes(value, placement):
    if placement.processes == 1:
        return value
    total = torch.tensor([value], dtype=torch.float64, device=device(placement))
    dist.all_reduce(total)
    return total.item() / placement.processes


def gpu_allocator_peak(placement):
    if placement.device_kind != "gpu":
        return {}
    return {"torch.cuda.max_memory_allocated": torch.cuda.max_memory_allocated(device(placement))}


def describe(placement):
    gpu = placement.device_kind == "gpu"
    return {
        "devices_used": {"kind": placement.device_kind, "count": placement.processes * placement.local_devices,
                   "names": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if gpu else []},
        "threads": {"torch_num_threads": torch.get_num_threads(), "processes": placement.processes},
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if gpu else None,
        "compile_backend": COMPILE_BACKEND if placement.handles["mode"] == COMPILE else None,
        "framework_cpu": cpu_kernels(),
    }


def cpu_kernels():
    """What PyTorch says it uses on the CPU: the kernels' instruction set, oneDNN (mkldnn)."""
    onednn = reported(lambda: re.search(r"(?:oneDNN|MKL-DNN) v([\w.]+)", torch.__config__.show()).group(1))
    return {"cpu_capability": reported(torch.backends.cpu.get_cpu_capability),
            "mkldnn_available": reported(torch.backends.mkldnn.is_available),
            "mkldnn_enabled": reported(lambda: bool(torch.backends.mkldnn.enabled)),
            "onednn_version": onednn}


def flushes_denormals():
    """Denormal float32s times one in PyTorch's CPU kernels (2**20 of them: its intra-op threads)."""
    inputs = torch.from_numpy(denormals())
    return flushed((inputs * torch.ones_like(inputs)).numpy())


# The products the proof counts, by aten op: convolutions and matrix products (FLOPs from
# torch.utils.flop_counter's formulas), the fused recurrent layers (`_recurrent_flops`: oneDNN's
# on CPUs, cuDNN's, MIOpen's) and fused attention (`_attention_flops`). Composite ops (linear, matmul, lstm) decompose into these before a
# dispatch mode sees them; an op's own kernels (mkldnn_convolution in convolution) run below it.
PRODUCTS = {"convolution", "_convolution", "convolution_overrideable", "cudnn_convolution",
            "_slow_conv2d_forward", "mm", "addmm", "_addmm_activation", "bmm", "baddbmm", "_scaled_mm"}
RECURRENT = {"mkldnn_rnn_layer", "_cudnn_rnn", "miopen_rnn"}
# F.scaled_dot_product_attention's fused kernels (the math fallback decomposes into bmm): `_attention_flops`
ATTENTION = {"_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"}


def _attention_flops(args):
    """A fused attention's two products: the scores (query x key, over the head's width) and their
    weighting of the values, 2 * batch * heads * queries * keys * (head width + value width)."""
    query, key, value = args[:3]
    rows = query.numel() // query.shape[-1]   # batch x heads x queries
    return 2 * rows * key.shape[-2] * (query.shape[-1] + value.shape[-1])


def _recurrent_flops(name, args):
    """A fused recurrent layer's products: each of its 2-D weights (input-hidden, hidden-hidden,
    per gate, layer and direction: 2*4*hidden*(input+hidden) per step for an LSTM layer) times
    every step of every sequence (the input's rows)."""
    weights = args[1:3] if name == "mkldnn_rnn_layer" else args[1]  # w_ih, w_hh; the others' weight lists
    rows = args[0].numel() // args[0].shape[-1]
    return 2 * rows * sum(w.numel() for w in weights if w.dim() == 2)


class _Products(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in PRODUCTS or name in RECURRENT or name in ATTENTION:
            dtype = next(t.dtype for t in tree_leaves(args) if isinstance(t, torch.Tensor) and t.is_floating_point())
            if name in RECURRENT:
                flops = _recurrent_flops(name, args)
            elif name in ATTENTION:
                flops = _attention_flops(args)
            elif name == "_addmm_activation":
                flops = flop_registry[torch.ops.aten.addmm](*args[:3], out_val=out)
            else:
                flops = flop_registry[func.overloadpacket](*args, **kwargs, out_val=out)
            self.ops.append(precision.op(f"aten.{name}", str(dtype).removeprefix("torch."), flops))
        return out


def forward_ops(fn, *args):
    """The compute ops that dispatched while fn(*args) ran (a forward pass under its policy), as
    dlbench.precision.op records: the aten op, the dtype of its first floating input (autocast's
    casts come before it), its FLOPs."""
    with _Products() as mode:
        fn(*args)
    return mode.ops


def teardown(placement):
    if placement.processes > 1:
        dist.barrier()  # no rank tears down while another still talks to it
        dist.destroy_process_group()


verify_adapter(__name__)  # the contract (dlbench.contract.Adapter), checked as this module loads
