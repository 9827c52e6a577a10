"""Micro-benchmark: 1x1 convolutions (pointwise) with their bias, activation and residual,
as the compiled ``conv2d_epilogue`` runs them (the kernel ``codegen`` binds for the node's
shapes), against NumPy's matmul alone on the same arrays (OpenBLAS's GEMM, no epilogue)
and onnxruntime running the same layer alone (Conv, its activation nodes and the residual
Add, which it fuses into its own conv where it can).

Run ``python -m benchmarks.pointwise_layers [--batches 1,16] [--rounds 7] [--cold]
[NAME-PART ...]`` (``--cold``: every timed call follows a pass over 32 MB of other data,
as in a model, where a layer's weight was last read a whole call ago; one thread per engine, set before NumPy loads OpenBLAS). Times are the best process CPU
time of ``--rounds`` calls, engines in turns; each line gives ms, dualgraph's ratio to
onnxruntime and the GEMM's share of dualgraph's time. The layers are those of three mobile
CNN families and ResNet's stride-2 downsampling, and shapes of no model (odd channels
and planes).
"""
from __future__ import annotations

import os
import sys

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = "1"

import time  # noqa: E402

import numpy as np  # noqa: E402

from .depthwise_layers import run_layers  # noqa: E402

COLD = "--cold" in sys.argv   # each timed call after 32 MB written: data and weight cold
_EVICT = np.zeros(8 << 20, np.float32) if COLD else None

# name, in channels, out channels, plane, stride, activation, residual (224x224 input)
LAYERS = [
    ("v2 32>16 112", 32, 16, 112, 1, "none", False),
    ("v2 16>96 112", 16, 96, 112, 1, "relu6", False),
    ("v2 96>24 56", 96, 24, 56, 1, "none", False),
    ("v2 24>144 56", 24, 144, 56, 1, "relu6", False),
    ("v2 144>24 56 res", 144, 24, 56, 1, "none", True),
    ("v2 32>192 28", 32, 192, 28, 1, "relu6", False),
    ("v2 192>32 28 res", 192, 32, 28, 1, "none", True),
    ("v2 64>384 14", 64, 384, 14, 1, "relu6", False),
    ("v2 384>64 14 res", 384, 64, 14, 1, "none", True),
    ("v2 96>576 14", 96, 576, 14, 1, "relu6", False),
    ("v2 576>96 14 res", 576, 96, 14, 1, "none", True),
    ("v2 160>960 7", 160, 960, 7, 1, "relu6", False),
    ("v2 960>160 7 res", 960, 160, 7, 1, "none", True),
    ("v2 320>1280 7", 320, 1280, 7, 1, "relu6", False),
    ("b0 16>96 112", 16, 96, 112, 1, "silu", False),
    ("b0 40>240 28", 40, 240, 28, 1, "silu", False),
    ("b0 240>40 28 res", 240, 40, 28, 1, "none", True),
    ("b0 112>672 14", 112, 672, 14, 1, "silu", False),
    ("b0 1152>192 7 res", 1152, 192, 7, 1, "none", True),
    ("b0 se 672>28 1", 672, 28, 1, 1, "silu", False),
    ("b0 se 28>672 1", 28, 672, 1, 1, "sigmoid", False),
    ("v3 96>576 7", 96, 576, 7, 1, "hardswish", False),
    ("r18 64>128 56/2", 64, 128, 56, 2, "none", False),
    ("r18 128>256 28/2", 128, 256, 28, 2, "none", False),
    ("r18 256>512 14/2", 256, 512, 14, 2, "none", False),
    # shapes of no model here: odd channels and planes
    ("odd 3>17 33", 3, 17, 33, 1, "relu", False),
    ("odd 50>70 9 res", 50, 70, 9, 1, "silu", True),
    ("odd 200>300 20/2", 200, 300, 20, 2, "relu", False),
    ("odd 40>100 75", 40, 100, 75, 1, "hardswish", False),
    ("odd 700>90 5", 700, 90, 5, 1, "none", False),
]


def onnxruntime_layer(x, w, b, stride, act, r):
    """A session running Conv(x, w, b), the nodes of ``act`` and ``+ r`` (an input)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    constants = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride] * 2)]
    y = "c"
    if act == "relu6":
        constants += [numpy_helper.from_array(np.float32(0), "lo"),
                      numpy_helper.from_array(np.float32(6), "hi")]
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["a"]))
        y = "a"
    elif act == "silu":
        nodes += [helper.make_node("Sigmoid", ["c"], ["s"]),
                  helper.make_node("Mul", ["c", "s"], ["a"])]
        y = "a"
    elif act != "none":
        op = {"relu": "Relu", "hardswish": "HardSwish", "sigmoid": "Sigmoid"}[act]
        nodes.append(helper.make_node(op, ["c"], ["a"]))
        y = "a"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    feeds = {"x": x}
    if r is not None:
        nodes.append(helper.make_node("Add", [y, "r"], ["y"]))
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, r.shape))
        feeds["r"] = r
    else:
        nodes.append(helper.make_node("Identity", [y], ["y"]))
    graph = helper.make_graph(nodes, "layer", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)[0]


def compiled_layer(x, w, b, stride, act, r):
    """The kernel the compiled ``conv2d_epilogue`` node runs for these shapes (its
    ``specialise``, else the op's kernel), as a call of the inputs, and its name."""
    from dualgraph.ops import epilogue
    name = "relu6" if act == "relu6" else act
    attrs = dict(act="clamp" if act == "relu6" else act,
                 bounds=(0.0, 6.0) if act == "relu6" else (-np.inf, np.inf),
                 residual_at="after" if r is not None else None)
    conv = dict(stride=(stride, stride), padding=((0, 0), (0, 0)), dilation=(1, 1), groups=1)
    residual = () if r is None else (r,)
    fitted = epilogue.CONV2D_EPILOGUE.specialise(x, w, b, *residual, **attrs, **conv)
    if fitted is not None:
        name, run = fitted
        return name, lambda: run(x, w, b, *residual)
    kernel = epilogue.CONV2D_EPILOGUE.kernel
    return f"kernel_{name}", lambda: kernel(x, w, b, *residual, **attrs, **conv)


def best_ms(fns, rounds):
    """``{name: best CPU ms}`` of each callable of ``fns``, called once per round in turns
    (with ``--cold``, each after the caches were filled with other data, untimed)."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, np.inf)
    for _ in range(rounds):
        for k, fn in fns.items():
            if COLD:
                np.add(_EVICT, 1, out=_EVICT)
            t0 = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - t0)
    return {k: 1e3 * v for k, v in best.items()}


def measure(layer, batch, rounds):
    import torch
    name, cin, cout, size, s, act, res = layer
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, cin, size, size), dtype=np.float32)
    w = rng.standard_normal((cout, cin, 1, 1), dtype=np.float32) / np.float32(np.sqrt(cin))
    b = rng.standard_normal(cout, dtype=np.float32)
    ho = (size - 1) // s + 1
    r = rng.standard_normal((batch, cout, ho, ho), dtype=np.float32) if res else None
    kernel, ours = compiled_layer(x, w, b, s, act, r)
    ort = onnxruntime_layer(x, w, b, s, act, r)
    f = torch.nn.functional
    tact = {"none": lambda v: v, "relu": f.relu, "relu6": f.relu6, "silu": f.silu,
            "hardswish": f.hardswish, "sigmoid": torch.sigmoid}[act]
    want = tact(f.conv2d(*map(torch.tensor, (x, w, b)), stride=s)).numpy()
    want = want + r if res else want
    for got in (ours(), ort()):
        assert np.allclose(got, want, rtol=1e-4, atol=1e-4), (name, np.abs(got - want).max())
    xs = np.ascontiguousarray(x[:, :, ::s, ::s]).reshape(batch, cin, -1)
    w2 = w.reshape(cout, cin)
    gemm_out = np.empty((batch, cout, ho * ho), np.float32)
    ms = best_ms({"dualgraph": ours, "onnxruntime": ort,
                  "gemm": lambda: np.matmul(w2, xs, out=gemm_out)}, rounds)
    print(f"{name:20s} b{batch:<3d} {kernel:18s} dualgraph {ms['dualgraph']:7.3f}  ort "
          f"{ms['onnxruntime']:7.3f}  gemm {ms['gemm']:7.3f}  /ort "
          f"{ms['dualgraph'] / ms['onnxruntime']:4.2f}  gemm/ort "
          f"{ms['gemm'] / ms['onnxruntime']:4.2f}", flush=True)


def main(argv=None):
    argv = [a for a in (sys.argv[1:] if argv is None else argv) if a != "--cold"]
    run_layers(argv, __doc__, LAYERS, measure, 7)


if __name__ == "__main__":
    sys.exit(main())
