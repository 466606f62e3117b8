"""Test models for the bundle proof, and bundle-shaped objects made from them without Glow.

Each model is a list of layers with fixed weights (a seeded generator): ``onnx_model`` writes it
as an ONNX file with the onnx package (opset 11: Glow's importer refuses opset 13's Softmax on a
2-D input), ``fake_bundle`` writes what model-compiler would for it, with the same API: C code
doing the same arithmetic, compiled by Debian's clang for a Cortex-M (Thumb, hard float), a
header in Glow's static-API format (placeholders, memory sizes, alignment, the entry point) and
the weights (.bin and .txt).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ALIGN = 64


@dataclass
class Layer:
    op: str  # gemm, relu, conv, maxpool, flatten, softmax
    weights: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Net:
    name: str
    input_shape: tuple[int, ...]
    layers: list[Layer]


def mlp(seed: int = 1) -> Net:
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    return Net("mlp", (1, 64), [
        Layer("gemm", {"W": w(32, 64), "b": w(32)}), Layer("relu"),
        Layer("gemm", {"W": w(10, 32), "b": w(10)}), Layer("softmax"),
    ])  # fmt: skip


def cnn(seed: int = 2) -> Net:
    rng = np.random.default_rng(seed)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    return Net("cnn", (1, 3, 32, 32), [
        Layer("conv", {"W": w(8, 3, 3, 3), "b": w(8)}), Layer("relu"), Layer("maxpool"),
        Layer("conv", {"W": w(16, 8, 3, 3), "b": w(16)}), Layer("relu"), Layer("maxpool"),
        Layer("flatten"), Layer("gemm", {"W": w(10, 1024), "b": w(10)}), Layer("softmax"),
    ])  # fmt: skip


def shapes(net: Net) -> list[tuple[int, ...]]:
    """Each layer's output shape."""
    shape, out = net.input_shape, []
    for layer in net.layers:
        if layer.op == "gemm":
            shape = (1, layer.weights["W"].shape[0])
        elif layer.op == "conv":
            shape = (1, layer.weights["W"].shape[0], shape[2], shape[3])
        elif layer.op == "maxpool":
            shape = (1, shape[1], shape[2] // 2, shape[3] // 2)
        elif layer.op == "flatten":
            shape = (1, int(np.prod(shape[1:])))
        out.append(shape)
    return out


def onnx_model(net: Net, path: Path, opset: int = 11, extra_op: str | None = None) -> Path:
    nodes, inits = [], []
    current = "input"
    for i, layer in enumerate(net.layers):
        name = f"t{i}"
        inputs = [current]
        for key, value in layer.weights.items():
            inits.append(numpy_helper.from_array(value, f"l{i}_{key}"))
            inputs.append(f"l{i}_{key}")
        if layer.op == "gemm":
            nodes.append(helper.make_node("Gemm", inputs, [name], transB=1))
        elif layer.op == "relu":
            nodes.append(helper.make_node("Relu", inputs, [name]))
        elif layer.op == "conv":
            nodes.append(
                helper.make_node("Conv", inputs, [name], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
            )
        elif layer.op == "maxpool":
            nodes.append(
                helper.make_node("MaxPool", inputs, [name], kernel_shape=[2, 2], strides=[2, 2])
            )
        elif layer.op == "flatten":
            nodes.append(helper.make_node("Flatten", inputs, [name], axis=1))
        elif layer.op == "softmax":
            nodes.append(helper.make_node("Softmax", inputs, [name], axis=1))
        current = name
    if extra_op:  # an operator Glow cannot import
        nodes.append(helper.make_node(extra_op, [current], ["extra"]))
        current = "extra"
    nodes.append(helper.make_node("Identity", [current], ["output"]))
    graph = helper.make_graph(
        nodes, net.name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(net.input_shape))],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, list(shapes(net)[-1]))],
        inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


_C_OPS = r"""
#include <stdint.h>
extern void *memcpy(void *, const void *, unsigned int);
extern float expf(float);
extern void __assert_fail(const char *, const char *, unsigned int, const char *);
#define CHECK(x) ((x) ? (void)0 : __assert_fail(#x, __FILE__, __LINE__, __func__))
static void gemm(const float *x, const float *w, const float *b, float *y, int n, int k) {
    for (int i = 0; i < n; i++) { float s = b[i]; for (int j = 0; j < k; j++) s += x[j] * w[i * k + j]; y[i] = s; }
}
static void relu(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] > 0 ? x[i] : 0; }
static void softmax(const float *x, float *y, int n) {
    float m = x[0], s = 0; for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    for (int i = 0; i < n; i++) { y[i] = expf(x[i] - m); s += y[i]; }
    CHECK(s > 0); for (int i = 0; i < n; i++) y[i] /= s;
}
static void conv(const float *x, const float *w, const float *b, float *y, int ci, int co, int h, int wd) {
    for (int o = 0; o < co; o++) for (int r = 0; r < h; r++) for (int c = 0; c < wd; c++) {
        float s = b[o];
        for (int i = 0; i < ci; i++) for (int kr = 0; kr < 3; kr++) for (int kc = 0; kc < 3; kc++) {
            int rr = r + kr - 1, cc = c + kc - 1;
            if (rr >= 0 && rr < h && cc >= 0 && cc < wd) s += x[(i * h + rr) * wd + cc] * w[((o * ci + i) * 3 + kr) * 3 + kc];
        }
        y[(o * h + r) * wd + c] = s;
    }
}
static void maxpool(const float *x, float *y, int ch, int h, int wd) {
    for (int k = 0; k < ch; k++) for (int r = 0; r < h / 2; r++) for (int c = 0; c < wd / 2; c++) {
        const float *p = x + (k * h + 2 * r) * wd + 2 * c; float m = p[0];
        if (p[1] > m) m = p[1]; if (p[wd] > m) m = p[wd]; if (p[wd + 1] > m) m = p[wd + 1];
        y[(k * (h / 2) + r) * (wd / 2) + c] = m;
    }
}
"""


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def fake_bundle(net: Net, directory: Path, *, name: str = "net", cpu: str = "cortex-m7",
                float_abi: str = "hard", extra_c: str = "", clang_args: tuple[str, ...] = ()) -> Path:  # fmt: skip
    """What model-compiler -emit-bundle writes for ``net``, made with clang: NAME.o, NAME.h,
    NAME.weights.bin and NAME.weights.txt in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    weights, offsets = bytearray(), {}
    for i, layer in enumerate(net.layers):
        for key, value in layer.weights.items():
            offsets[(i, key)] = len(weights)
            weights += value.astype("<f4").tobytes()
            weights += bytes(_aligned(len(weights)) - len(weights))
    out_shapes = shapes(net)
    in_elems, out_elems = int(np.prod(net.input_shape)), int(np.prod(out_shapes[-1]))
    in_off, out_off = 0, _aligned(in_elems * 4)
    mutable = _aligned(out_off + out_elems * 4)
    largest = max(int(np.prod(s)) for s in out_shapes)
    act_b = _aligned(largest * 4)
    activations = 2 * act_b
    body = [f"int {name}(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations) {{",
            f"    const float *x = (const float *)(mutableWeight + {in_off});",
            "    float *a = (float *)activations;", f"    float *b = (float *)(activations + {act_b});"]  # fmt: skip
    shape = net.input_shape
    for i, layer in enumerate(net.layers):
        dst = "a" if i % 2 == 0 else "b"
        wp = lambda key: f"(const float *)(constantWeight + {offsets[(i, key)]})"  # noqa: B023, E731
        if layer.op == "gemm":
            n, k = layer.weights["W"].shape
            body.append(f"    gemm(x, {wp('W')}, {wp('b')}, {dst}, {n}, {k});")
        elif layer.op == "conv":
            co, ci = layer.weights["W"].shape[:2]
            body.append(
                f"    conv(x, {wp('W')}, {wp('b')}, {dst}, {ci}, {co}, {shape[2]}, {shape[3]});"
            )
        elif layer.op == "maxpool":
            body.append(f"    maxpool(x, {dst}, {shape[1]}, {shape[2]}, {shape[3]});")
        elif layer.op in ("relu", "flatten"):
            n = int(np.prod(out_shapes[i]))
            body.append(
                f"    memcpy({dst}, x, {n * 4});"
                + (f" relu({dst}, {n});" if layer.op == "relu" else "")
            )
        elif layer.op == "softmax":
            body.append(f"    softmax(x, {dst}, {int(np.prod(out_shapes[i]))});")
        body.append(f"    x = {dst};")
        shape = out_shapes[i]
    body += [f"    memcpy(mutableWeight + {out_off}, x, {out_elems * 4});", "    return 0;", "}"]
    source = directory / f"{name}.c"
    source.write_text(_C_OPS + extra_c + "\n".join(body) + "\n")
    subprocess.run(["clang-14", "--target=thumbv7em-none-eabi", f"-mcpu={cpu}", f"-mfloat-abi={float_abi}",
                    "-O2", "-ffast-math", "-ffreestanding", "-fno-builtin", "-c", str(source),
                    "-o", str(directory / f"{name}.o"), *clang_args], check=True)  # fmt: skip
    source.unlink()
    (directory / f"{name}.weights.bin").write_bytes(bytes(weights))
    (directory / f"{name}.weights.txt").write_text(",".join(f"0X{b:02X}" for b in weights) + "\n")
    upper = name.upper()

    def dims(s: tuple[int, ...]) -> str:
        return " x ".join(str(d) for d in s)

    header = f"""// Bundle API auto-generated header file. Do not edit!
// Glow Tools version: (made by dockerarch's tests, in Glow's format)

#ifndef _GLOW_BUNDLE_{upper}_H
#define _GLOW_BUNDLE_{upper}_H

#include <stdint.h>

#define GLOW_MEM_ALIGN(size)  __attribute__((aligned(size)))
#define GLOW_GET_ADDR(mutableBaseAddr, placeholderOff)  (((uint8_t*)(mutableBaseAddr)) + placeholderOff)

// Model name: "{name}"
// Total data size: {len(weights) + mutable + activations} (bytes)
// Activations allocation efficiency: 1.0000
// Placeholders:
//
//   Name: "input"
//   Type: float<{dims(net.input_shape)}>
//   Size: {in_elems} (elements)
//   Size: {in_elems * 4} (bytes)
//   Offset: {in_off} (bytes)
//
//   Name: "output"
//   Type: float<{dims(out_shapes[-1])}>
//   Size: {out_elems} (elements)
//   Size: {out_elems * 4} (bytes)
//   Offset: {out_off} (bytes)
//
// Placeholder address offsets within mutable buffer (bytes).
#define {upper}_input   {in_off}
#define {upper}_output  {out_off}

// Memory sizes (bytes).
#define {upper}_CONSTANT_MEM_SIZE     {len(weights)}
#define {upper}_MUTABLE_MEM_SIZE      {mutable}
#define {upper}_ACTIVATIONS_MEM_SIZE  {activations}

// Memory alignment (bytes).
#define {upper}_MEM_ALIGN  {ALIGN}

#ifdef __cplusplus
extern "C" {{
#endif

// Bundle entry point (inference function). Returns 0
// for correct execution or some error code otherwise.
int {name}(uint8_t *constantWeight, uint8_t *mutableWeight, uint8_t *activations);

#ifdef __cplusplus
}}
#endif
#endif
"""
    (directory / f"{name}.h").write_text(header)
    return directory
