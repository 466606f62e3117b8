"""The ONNX side of a bundle's proof: the model read and checked for what Glow's importer takes,
the fixed input every proof feeds it, and onnxruntime's outputs for that input on this machine."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dockerarch.errors import UsageError

# numpy arrays (the mcu extra's numpy, imported when a proof runs: not a dependency of
# dockerarch itself, so not named here even for typing)
Array = Any

# Glow's ONNX importer (pytorch/glow 2024-05: ONNXModelLoader, CommonOperatorLoader): the
# standard ONNX operators it imports. Anything else stops model-compiler; dockerarch says so first.
GLOW_ONNX_OPS = frozenset(
    """
Abs Acos Add And ArgMax ArgMin Asin Atan AveragePool BatchNormalization Cast Ceil Clip Concat
Constant ConstantOfShape Conv ConvTranspose Cos CumSum DepthToSpace DequantizeLinear Div Dropout
Equal Erf Exp Expand Flatten Floor GRU Gather GatherND Gemm GlobalAveragePool Greater HardSigmoid
Identity If InstanceNormalization LRN LSTM LeakyRelu Less Log LogSoftmax Loop MatMul Max MaxPool
Mean Min Mul Neg NonMaxSuppression NonZero Not Or PRelu Pad Pow QuantizeLinear RNN Range
Reciprocal ReduceL2 ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu
Reshape Resize RoiAlign ScatterND Shape Sigmoid Sign Sin Slice Softmax SpaceToDepth Split Sqrt
Squeeze Sub Sum Tanh Tile TopK Transpose Unsqueeze Upsample Where Xor
""".split()
)
MAX_OPSET = 13  # the newest default-domain opset Glow's importer handles in practice
SEED = 20260517  # the proof's fixed input: the same for every run and machine


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(
            f"The bundle's proof needs the Python package '{module}', which is not installed",
            fix="Install dockerarch with its MCU extra: pip install 'dockerarch[mcu]' "
            "(scripts/setup-host does).",
        ) from None


@dataclass(frozen=True)
class Tensor:
    name: str
    dims: tuple[int, ...]
    elem_type: int  # onnx.TensorProto's


@dataclass(frozen=True)
class Model:
    path: Path
    sha256: str
    opset: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    operators: tuple[str, ...]


FLOAT = 1  # onnx.TensorProto.FLOAT


def legal_name(name: str) -> str:
    """The name Glow gives a placeholder made from an ONNX value's name (Glow's
    legalizeName: characters other than letters, digits and '_' become '_'; a leading digit
    gets '_' in front)."""
    legal = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "_" + legal if legal[:1].isdigit() else legal


def load(path: Path) -> Model:
    onnx = _need("onnx")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"Cannot read the model {path}: {exc.strerror or exc}",
                         fix="Give the path of an .onnx file.") from None  # fmt: skip
    try:
        proto = onnx.load_from_string(data)
        onnx.checker.check_model(proto)
    except Exception as exc:  # the onnx package's errors are of several kinds
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{path} is not a valid ONNX model: {first}",
                         fix="Export the model again (torch.onnx.export, or the onnx "
                         "package's checker shows what is wrong).") from None  # fmt: skip
    opset = max((i.version for i in proto.opset_import if i.domain in ("", "ai.onnx")), default=0)
    ops = sorted({node.op_type for node in proto.graph.node})
    foreign = sorted({n.domain for n in proto.graph.node if n.domain not in ("", "ai.onnx")})
    if foreign:
        raise UsageError(f"{path} uses operators of the domain(s) {', '.join(foreign)}, which "
                         "Glow's ONNX importer does not know",
                         fix="Export the model with standard ONNX operators only.")  # fmt: skip
    if opset > MAX_OPSET:
        raise UsageError(
            f"{path} is ONNX opset {opset}; Glow's importer handles opset {MAX_OPSET} and lower",
            fix=f"Export it again with opset_version={MAX_OPSET} (torch.onnx.export), or convert "
            f"it: onnx.version_converter.convert_version(model, {MAX_OPSET}).",
        )
    unknown = [op for op in ops if op not in GLOW_ONNX_OPS]
    if unknown:
        raise UsageError(
            f"{path} uses the operator(s) {', '.join(unknown)}, which Glow's ONNX importer cannot "
            "import",
            fix="Replace them in the model with operators Glow has (an export with another "
            "opset, or onnx-simplifier, often removes them).",
        )
    initializers = {i.name for i in proto.graph.initializer}

    def tensors(values: Any) -> tuple[Tensor, ...]:
        found = []
        for value in values:
            if value.name in initializers:
                continue
            shape = value.type.tensor_type.shape
            dims = []
            for dim in shape.dim:
                if not dim.HasField("dim_value"):
                    raise UsageError(
                        f"{path}: the size '{dim.dim_param or '?'}' of '{value.name}' is not "
                        "fixed; a bundle's buffers are sized when it is made",
                        fix="Export the model with fixed input sizes (batch 1).",
                    )
                dims.append(dim.dim_value)
            found.append(Tensor(value.name, tuple(dims), value.type.tensor_type.elem_type))
        return tuple(found)

    return Model(path=path, sha256=hashlib.sha256(data).hexdigest(), opset=opset,
                 inputs=tensors(proto.graph.input), outputs=tensors(proto.graph.output),
                 operators=tuple(ops))  # fmt: skip


def fixed_inputs(model: Model) -> dict[str, Array]:
    """The proof's input: for each model input, values uniform in [-1, 1) from a fixed seed."""
    np = _need("numpy")
    rng = np.random.default_rng(SEED)
    inputs = {}
    for tensor in model.inputs:
        if tensor.elem_type != FLOAT:
            raise UsageError(
                f"The model's input '{tensor.name}' is not float32; the proof feeds float "
                "inputs only",
                fix="Prove a float model (a quantised one's bundle is checked, not run).",
            )
        inputs[tensor.name] = rng.uniform(-1.0, 1.0, size=tensor.dims).astype(np.float32)
    return inputs


def run(model: Model, inputs: dict[str, Array]) -> dict[str, Array]:
    """onnxruntime's outputs for ``inputs`` on this machine's CPU."""
    ort = _need("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(model.path), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in model.outputs]
    return dict(zip(names, session.run(names, inputs), strict=True))
