"""Micro-benchmark: conv2d forward, input gradient and weight gradient, per ``conv_method``,
on layers of four model families, dualgraph's eager kernels vs torch (same thread count)
and, for the forward, onnxruntime (a one-node ONNX Conv).

Run ``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 DUALGRAPH_NUM_THREADS=1 python -m
benchmarks.conv_kernels [NAME-PART ...]`` (the arguments pick layers by name). Times are the
best of 5: process CPU time on one thread (a busy machine disturbs it less than wall time),
wall time on more. Each line: the method, GFLOP of the forward, then dualgraph / peer = ratio.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

# name, input shape, weight shape, stride, padding, groups
LAYERS = [
    ("lenet c1", (64, 1, 28, 28), (6, 1, 5, 5), 1, 2, 1),
    ("lenet c2", (64, 6, 14, 14), (16, 6, 5, 5), 1, 0, 1),
    ("mnist c1", (64, 1, 28, 28), (32, 1, 3, 3), 1, 0, 1),
    ("mnist c2", (64, 32, 26, 26), (64, 32, 3, 3), 1, 0, 1),
    ("cifar 16", (64, 16, 32, 32), (16, 16, 3, 3), 1, 1, 1),
    ("cifar 16->32 s2", (64, 16, 32, 32), (32, 16, 3, 3), 2, 1, 1),
    ("cifar 32", (64, 32, 16, 16), (32, 32, 3, 3), 1, 1, 1),
    ("cifar 32->64 s2", (64, 32, 16, 16), (64, 32, 3, 3), 2, 1, 1),
    ("cifar 64", (64, 64, 8, 8), (64, 64, 3, 3), 1, 1, 1),
    ("cifar stem", (64, 3, 32, 32), (16, 3, 3, 3), 1, 1, 1),
    ("cifar 1x1 32->64 s2", (64, 32, 16, 16), (64, 32, 1, 1), 2, 0, 1),
    ("cifar b8 16", (8, 16, 32, 32), (16, 16, 3, 3), 1, 1, 1),
    ("cifar b8 64", (8, 64, 8, 8), (64, 64, 3, 3), 1, 1, 1),
    ("cifar 1x1 s2", (64, 16, 32, 32), (32, 16, 1, 1), 2, 0, 1),
    ("small 3->32 b16", (16, 3, 32, 32), (32, 3, 3, 3), 1, 1, 1),
    ("small 32->64 b16", (16, 32, 32, 32), (64, 32, 3, 3), 1, 1, 1),
    ("small 32->64 s2 b16", (16, 32, 32, 32), (64, 32, 3, 3), 2, 1, 1),
    ("small 5x5 1->20 b32", (32, 1, 28, 28), (20, 1, 5, 5), 1, 0, 1),
    ("small 5x5 20->50 b32", (32, 20, 24, 24), (50, 20, 5, 5), 1, 0, 1),
    ("small 5x5 32->32 b8", (8, 32, 28, 28), (32, 32, 5, 5), 1, 2, 1),
    ("r18 conv1 b1", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1),
    ("mb stem 3->32 s2 b1", (1, 3, 224, 224), (32, 3, 3, 3), 2, 1, 1),
    ("odd stem 3->24 s2 b1", (1, 3, 97, 97), (24, 3, 3, 3), 2, 1, 1),
    ("odd 5x5 3->20 b1", (1, 3, 64, 64), (20, 3, 5, 5), 1, 2, 1),
    ("r18 64 b1", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
    ("r18 64 b16", (16, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
    ("r18 512 b16", (16, 512, 7, 7), (512, 512, 3, 3), 1, 1, 1),
    ("mb dw32 b1", (1, 32, 112, 112), (32, 1, 3, 3), 1, 1, 32),
    ("mb dw96s2 b1", (1, 96, 112, 112), (96, 1, 3, 3), 2, 1, 96),
    ("mb dw384 b1", (1, 384, 14, 14), (384, 1, 3, 3), 1, 1, 384),
    ("mb dw960 b1", (1, 960, 7, 7), (960, 1, 3, 3), 1, 1, 960),
    ("mb dw144 b16", (16, 144, 56, 56), (144, 1, 3, 3), 1, 1, 144),
    ("mb dw96s2 b16", (16, 96, 112, 112), (96, 1, 3, 3), 2, 1, 96),
    ("mb dw960 b16", (16, 960, 7, 7), (960, 1, 3, 3), 1, 1, 960),
    ("mb pw 144->24 b16", (16, 144, 56, 56), (24, 144, 1, 1), 1, 0, 1),
]
THREADS = int(os.environ.get("OMP_NUM_THREADS", "1"))
CLOCK = time.process_time if THREADS == 1 else time.perf_counter


def best_ms(fn, repeat=5):
    fn()
    times = []
    for _ in range(repeat):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return 1e3 * min(times)


def onnxruntime_conv(x, w, stride, padding, groups, bias=None, act=None):
    """A session running one ONNX Conv of ``x`` with the constant ``w`` (and ``bias``),
    then the nodes of ``act`` ("relu", "relu6", "silu" or "hardswish"; onnxruntime fuses
    the activation into the conv where it can)."""
    from onnx import helper, numpy_helper
    inputs, constants = ["x", "w"], [numpy_helper.from_array(w, "w")]
    if bias is not None:
        inputs.append("b")
        constants.append(numpy_helper.from_array(bias, "b"))
    nodes = [helper.make_node("Conv", inputs, ["c" if act else "y"], strides=[stride] * 2,
                              pads=[padding] * 4, group=groups)]
    if act == "relu6":
        constants += [numpy_helper.from_array(np.float32(0), "lo"),
                      numpy_helper.from_array(np.float32(6), "hi")]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
    elif act == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]),
                  helper.make_node("Mul", ["c", "s"], ["y"])]
    elif act:
        nodes.append(helper.make_node({"relu": "Relu", "hardswish": "HardSwish"}[act],
                                      ["c"], ["y"]))
    return onnxruntime_nodes(x, nodes, constants)


def onnxruntime_nodes(x, nodes, constants=()):
    """A session (``THREADS`` threads) running ``nodes`` (ONNX nodes from input ``x`` to
    output ``y``, with the initialisers ``constants``) on ``x``."""
    import onnxruntime as ort
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(constants))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": x})


def measure(layer):
    import torch

    from dualgraph.ops import conv
    name, xs, ws, s, p, g = layer
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32) / 10
    attrs = dict(stride=(s, s), padding=((p, p), (p, p)), dilation=(1, 1), groups=g)
    gy = rng.standard_normal(conv._conv2d_kernel(x, w, **attrs).shape, dtype=np.float32)
    tx, tw, tg = map(torch.tensor, (x, w, gy))

    def torch_grad(mask):
        return lambda: torch.ops.aten.convolution_backward(
            tg, tx, tw, None, [s, s], [p, p], [1, 1], False, [0, 0], g, mask)
    ours = [lambda: conv._conv2d_kernel(x, w, **attrs),
            lambda: conv._input_grad_kernel(gy, w, input_size=xs[2:], **attrs),
            lambda: conv._weight_grad_kernel(x, gy, kernel_size=ws[2:], **attrs)]
    peers = [lambda: torch.nn.functional.conv2d(tx, tw, None, s, p, 1, g),
             torch_grad([True, False, False]), torch_grad([False, True, False])]
    ort_ms = best_ms(onnxruntime_conv(x, w, s, p, g))
    cells = []
    for label, mine, peer in zip(("fwd", "dx", "dw"), ours, peers):
        a, b = best_ms(mine), best_ms(peer)
        cells.append(f"{label} {a:7.2f}/{b:6.2f}={a / b:4.1f}x")
        if label == "fwd":
            cells.append(f"ort {ort_ms:6.2f}={a / ort_ms:4.1f}x")
    method = conv.conv_method(xs, ws, (s, s), ((p, p), (p, p)), (1, 1), g)
    gflop = 2 * np.prod(gy.shape) * np.prod(ws[1:]) / 1e9
    print(f"{name:18s} {method:9s} {gflop:5.2f} GF  " + "  ".join(cells), flush=True)


def main(parts):
    import torch
    torch.set_num_threads(THREADS)
    print(f"threads {THREADS}; dualgraph / torch (fwd, dx, dw), dualgraph / onnxruntime (fwd)")
    for layer in LAYERS:
        if not parts or any(part in layer[0] for part in parts):
            measure(layer)


if __name__ == "__main__":
    main(sys.argv[1:])
