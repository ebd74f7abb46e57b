"""The proof of a JAX computation's precision (dlbench.precision): its compute operations as XLA
compiled them. `forward_ops(fn, *args)` compiles jax.jit(fn) for the arguments and reads the
optimised HLO (Compiled.as_text()): every convolution and dot, wherever it ended up (the entry,
a fusion, a while loop's body: a scan's ops count once per trip, from the loop's
known_trip_count), with the dtype of its operands AS COMPILED. The compiled program, not the
traced one, is the proof: XLA may rewrite what was asked for (its CPU backend's float
normalisation turns a bfloat16 dot or convolution into a float32 one on float32 copies of the
bfloat16-rounded operands; then float32 is what ran). On GPUs XLA calls cuBLAS and cuDNN through
custom calls (`__cublas$gemm`, `__cudnn$convForward`...), read the same way (written from XLA's
documented forms; not run here: no GPU).

Used by the JAX workload modules (step.WorkloadMethods.precision_ops) and by Keras on JAX."""
import json
import re

# the custom calls of a matrix product on GPUs: cuBLAS' (__cublas$gemm, __cublas$lt$matmul) and oneDNN's
PRODUCT_TARGET = re.compile(r"gemm|mat" r"mul", re.IGNORECASE)

from dlbench import precision

HLO_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64", "s8": "int8",
              "u8": "uint8", "s32": "int32", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2"}
WIDTH = {"float64": 8, "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2}
INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?(\S+)\s*=\s*(.*)$")
COMPUTATION = re.compile(r"^\s*(ENTRY\s+)?%?(\S+)\s*(?:\(.*)?\{\s*$")  # the text's names with or without %
ARRAY = re.compile(r"^([a-z][a-z0-9]*)\[([0-9,]*)\]")
CALLED = re.compile(r"\b(calls|body|to_apply|branch_computations)=\{?([^}\s,]+(?:,\s*%[^}\s,]+)*)\}?")


def forward_ops(fn, *args):
    """The compute operations of jax.jit(fn)(*args) as XLA compiled it: a list of
    dlbench.precision.op. fn closes over what it needs; args are arrays (or pytrees of them)."""
    import jax

    return hlo_ops(jax.jit(fn).lower(*args).compile().as_text())


def _shape(text):
    """(dtype, dims) of an HLO shape at the start of `text`; a tuple's first element (a cuBLAS or
    cuDNN custom call returns (result, workspace))."""
    match = ARRAY.match(text.lstrip("("))
    if not match:
        return None, ()
    return HLO_DTYPES.get(match.group(1), match.group(1)), tuple(int(d) for d in match.group(2).split(",") if d)


def _split(rest):
    """An instruction's text after '=': its shape, its opcode, its operand names, its attributes."""
    if rest.startswith("("):  # a tuple shape: up to its matching parenthesis
        depth = 0
        for end, char in enumerate(rest):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                break
        shape, rest = rest[:end + 1], rest[end + 1:].lstrip()
    else:
        shape, _, rest = rest.partition(" ")
    opcode, _, rest = rest.partition("(")
    depth, end = 1, 0
    for end, char in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            break
    return shape, opcode.strip(), _operands(rest[:end]), rest[end + 1:]


def _operands(text):
    """The operand names of an instruction's argument list ("%a, %b" or "f32[2,3]{1,0} %a, ...")."""
    names, depth, start = [], 0, 0
    for i, char in enumerate(text + ","):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            if text[start:i].strip():
                names.append(text[start:i].split()[-1].lstrip("%"))
            start = i + 1
    return names


def _product(values):
    result = 1
    for value in values:
        result *= value
    return result


def _dims(attributes, name):
    match = re.search(rf"\b{name}=\{{([0-9,]*)\}}", attributes)
    return [int(d) for d in match.group(1).split(",") if d] if match else []


def _backend_config(attributes):
    match = re.search(r"backend_config=(\{.*\})(?:,\s*\w+=|$)", attributes)
    if not match:
        return {}
    try:
        return json.loads(match.group(1))
    except ValueError:
        return {}


def _conv_flops(out_dims, kernel_dims, attributes):
    """2 x output elements x input features per group x kernel spatial size (dim_labels name the
    kernel's dimensions: i its input features, o its outputs, digits its spatial ones)."""
    labels = re.search(r"dim_labels=[^_]+_([^-]+)->", attributes)
    if not labels or len(labels.group(1)) != len(kernel_dims):
        return 0.0
    kernel = dict(zip(labels.group(1), kernel_dims))
    spatial = _product(size for label, size in kernel.items() if label.isdigit())
    return 2.0 * _product(out_dims) * kernel["i"] * spatial


def _dot_flops(out_dims, lhs_dims, contracting):
    """2 x output elements x the contracted size."""
    return 2.0 * _product(out_dims) * _product(lhs_dims[d] for d in contracting)


def _operand_dtype(dtypes):
    """The dtype the product was multiplied in: its operands', the widest where they differ."""
    dtypes = [d for d in dtypes if d]
    return max(dtypes, key=lambda d: WIDTH.get(d, 4)) if dtypes else "unknown"


def hlo_ops(text):
    """dlbench.precision.op for each convolution and dot of an optimised HLO module's text,
    its FLOPs times the trips of the while loops around it."""
    computations, entry, current = {}, None, None
    for line in text.splitlines():
        header = COMPUTATION.match(line)
        if header and " = " not in line.split("(", 1)[0]:
            current = header.group(2)
            computations[current] = []
            entry = current if header.group(1) else entry
            continue
        instruction = INSTRUCTION.match(line)
        if instruction and current is not None:
            name, rest = instruction.groups()
            computations[current].append((name, *_split(rest)))
    # how many times each computation runs: from the entry down (a while body: times its trips)
    runs, pending = {entry: 1}, [entry]
    while pending:
        computation = pending.pop()
        for _, _, opcode, _, attributes in computations.get(computation, []):
            trips = 1
            if opcode == "while":
                config = _backend_config(attributes)
                trips = int(config.get("known_trip_count", {}).get("n", 1))
            for kind, names in CALLED.findall(attributes):
                for called in re.findall(r"%?([^\s,%{}]+)", names):
                    if called in computations and called not in runs:
                        runs[called] = runs[computation] * (trips if kind == "body" else 1)
                        pending.append(called)
    ops = []
    for computation, times in runs.items():
        shapes = {name: _shape(shape) for name, shape, *_ in computations[computation]}
        for _, shape, opcode, operands, attributes in computations[computation]:
            _, out_dims = _shape(shape)
            operand_shapes = [shapes.get(o, (None, ())) for o in operands]
            flops, kind = 0.0, None
            target = re.search(r'custom_call_target="([^"]+)"', attributes)
            target = target.group(1) if target else ""
            if opcode == "convolution" or (opcode == "custom-call" and "conv" in target.lower()):
                if len(operand_shapes) >= 2:
                    flops, kind = _conv_flops(out_dims, operand_shapes[1][1], attributes), "convolution"
            elif opcode == "dot":
                contracting = _dims(attributes, "lhs_contracting_dims")
                flops, kind = _dot_flops(out_dims, operand_shapes[0][1], contracting), "dot"
            elif opcode == "custom-call" and PRODUCT_TARGET.search(target):
                numbers = _backend_config(attributes)
                numbers = numbers.get("gemm_backend_config", numbers).get("dot_dimension_numbers", {})
                contracting = [int(d) for d in numbers.get("lhs_contracting_dimensions", [])]
                flops, kind = _dot_flops(out_dims, operand_shapes[0][1], contracting), "dot"
            if kind:
                dtype = _operand_dtype([dtype for dtype, _ in operand_shapes[:2]])
                ops.append(precision.op(f"{kind}:{target}" if target else kind, dtype, flops * times))
    return ops
