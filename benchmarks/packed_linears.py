"""Micro-benchmark: the packed linear loop (``kernels/linear_packed.py``, the compiled
``linear_packed`` node's product) against onnxruntime's MatMul on the same weights, with
the weights cold as in a model: each timed call runs ``--weights`` products in turn, each
on a weight of its own (16 by default: 4-16 MB, more than the second level cache holds),
so that a weight was last read a whole pass ago; ``--weights 1`` times a hot weight.

Run ``python -m benchmarks.packed_linears [--weights 16] [--rounds 12]
[ROWSxKxN ...]``. One thread per engine (set before NumPy loads OpenBLAS). Each line: the
best process CPU time of a product, in us, for both engines and dualgraph's ratio to
onnxruntime; outputs compared. The default shapes are the linears of small transformers
at batch 1 (128 and 197 rows); a wide one (an LM head, ``128x384x8192``) is best given
with ``--weights 2`` (16 would hold 400 MB).
"""
from __future__ import annotations

import os
import sys

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

SHAPES = ["128x256x1024", "128x1024x256", "128x256x768", "197x192x768", "197x768x192",
          "197x192x576"]


def onnxruntime_products(x_shape, weights):
    """A call running onnxruntime's MatMul of one input by each of ``weights`` (K, N)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"])
             for i in range(len(weights))]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None)
            for i in range(len(weights))]
    graph = helper.make_graph(nodes, "products",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              outs, [numpy_helper.from_array(w, f"w{i}")
                                     for i, w in enumerate(weights)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})


def measure(rows: int, k: int, n: int, count: int, rounds: int) -> dict:
    from dualgraph.kernels import linear_packed
    rng = np.random.default_rng(rows + k + n)
    x = rng.standard_normal((rows, k)).astype(np.float32)
    weights = [(rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
               for _ in range(count)]
    packed = [linear_packed.pack(w) for w in weights]
    outs = [np.empty((rows, n), np.float32) for _ in weights]
    ours = lambda: [linear_packed.product(x, p, n, None, o) for p, o in zip(packed, outs)]
    theirs = onnxruntime_products(list(x.shape), [np.ascontiguousarray(w.T) for w in weights])
    engines = {"dualgraph": ours, "onnxruntime": lambda: theirs(x)}
    got, want = ours(), theirs(x)
    assert all(np.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(got, want))
    best = dict.fromkeys(engines, float("inf"))
    for _ in range(rounds):
        for name, call in engines.items():
            start = time.process_time()
            call()
            best[name] = min(best[name], (time.process_time() - start) / count)
    return best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*", default=SHAPES)
    parser.add_argument("--weights", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}, {args.weights} weight(s) in turn")
    for shape in args.shapes:
        rows, k, n = map(int, shape.split("x"))
        best = measure(rows, k, n, args.weights, args.rounds)
        ours, theirs = best["dualgraph"] * 1e6, best["onnxruntime"] * 1e6
        print(f"{shape}: dualgraph {ours:.0f} us, onnxruntime {theirs:.0f} us, "
              f"ratio {ours / theirs:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
