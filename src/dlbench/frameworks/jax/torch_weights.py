"""The parity weight conversion: PyTorch's state dict into a Flax NNX model."""
import jax
import numpy as np


def torch_to_flax(model, weights, keep=()):
    """Load PyTorch's state dict into a Flax NNX model whose module paths are PyTorch's
    ('features.denseblock1.denselayer1.conv1' is model.features.denseblock1.denselayer1.conv1,
    '3' of an nn.Sequential is nnx.Sequential's layers[3]): Conv OIHW -> HWIO, Linear (out, in)
    -> (in, out), BatchNorm weight, bias, running mean and variance as scale, bias, mean, var,
    Embedding as is; num_batches_tracked has no counterpart. Every parameter and statistic of
    the model must be given, and every array used, but those whose names start with a prefix in
    `keep`, which keep their values (e.g. a classifier of another size)."""
    from flax import nnx

    targets = {}  # PyTorch name -> (variable, array in Flax's layout)
    for path, module in nnx.iter_modules(model):
        prefix = ".".join(str(p) for p in path if p != "layers")
        name = (prefix + ".") if prefix else ""
        if isinstance(module, nnx.Conv):
            targets[name + "weight"] = (module.kernel, lambda w: w.transpose(2, 3, 1, 0))
            if module.bias is not None:
                targets[name + "bias"] = (module.bias, None)
        elif isinstance(module, nnx.Linear):
            targets[name + "weight"] = (module.kernel, lambda w: w.T)
            if module.bias is not None:
                targets[name + "bias"] = (module.bias, None)
        elif isinstance(module, nnx.BatchNorm):
            for torch_kind, variable in (("weight", module.scale), ("bias", module.bias),
                                         ("running_mean", module.mean), ("running_var", module.var)):
                targets[name + torch_kind] = (variable, None)
        elif isinstance(module, nnx.Embed):
            targets[name + "weight"] = (module.embedding, None)
    targets = {k: v for k, v in targets.items() if not k.startswith(tuple(keep))}
    given = {k: v for k, v in weights.items()
             if not k.endswith(".num_batches_tracked") and not k.startswith(tuple(keep))}
    missing, unused = sorted(set(targets) - set(given)), sorted(set(given) - set(targets))
    if missing or unused:
        raise ValueError(f"PyTorch's state dict does not match the Flax model: missing {missing[:5]} "
                         f"({len(missing)}), unused {unused[:5]} ({len(unused)})")
    for name, (variable, convert) in targets.items():
        value = np.asarray(given[name], dtype=np.float32)
        value = convert(value) if convert else value
        if value.shape != variable.get_value().shape:
            raise ValueError(f"{name}: shape {value.shape} in Flax's layout, the model's {variable.get_value().shape}")
        variable.set_value(jax.numpy.asarray(value))
