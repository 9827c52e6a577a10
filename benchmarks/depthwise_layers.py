"""Micro-benchmark: the depthwise convolutions of three mobile CNN families (MobileNetV2,
a MobileNetV3-small-like stack, EfficientNet-B0), each with its bias and activation as
the compiled ``conv2d_epilogue`` runs it (``kernels/conv_direct.py``), against
onnxruntime running the same layer alone (Conv and its activation nodes) and torch eager.

Run ``python -m benchmarks.depthwise_layers [--batches 1,16] [--rounds 5] [--blocked]
[NAME-PART ...]`` (one thread per engine, set before NumPy loads OpenBLAS). Times are the
best process CPU time of ``--rounds`` calls, engines in turns; each line gives ms and
dualgraph's ratio to onnxruntime and to torch. ``--blocked`` times dualgraph's loop on
channel-blocked activations instead (``conv_blocked.fitted_depthwise``, the
``depthwise_blocked`` node of a compiled mobile CNN; layers of a multiple of eight
channels), its input and output already blocked, as onnxruntime's NCHWc nodes are in a
model (here alone, onnxruntime also reorders into and out of its blocked layout).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

from .conv_kernels import onnxruntime_conv  # noqa: E402

# name, channels, plane, kernel, stride, activation (the models' own, 224x224 input)
LAYERS = [
    ("v2 32 112", 32, 112, 3, 1, "relu6"), ("v2 96 112/2", 96, 112, 3, 2, "relu6"),
    ("v2 144 56", 144, 56, 3, 1, "relu6"), ("v2 144 56/2", 144, 56, 3, 2, "relu6"),
    ("v2 192 28", 192, 28, 3, 1, "relu6"), ("v2 192 28/2", 192, 28, 3, 2, "relu6"),
    ("v2 384 14", 384, 14, 3, 1, "relu6"), ("v2 576 14", 576, 14, 3, 1, "relu6"),
    ("v2 576 14/2", 576, 14, 3, 2, "relu6"), ("v2 960 7", 960, 7, 3, 1, "relu6"),
    ("v3 16 112/2", 16, 112, 3, 2, "relu"), ("v3 64 56/2", 64, 56, 3, 2, "relu"),
    ("v3 72 28", 72, 28, 3, 1, "relu"), ("v3 96 28/2 k5", 96, 28, 5, 2, "hardswish"),
    ("v3 240 14 k5", 240, 14, 5, 1, "hardswish"), ("v3 120 14 k5", 120, 14, 5, 1, "hardswish"),
    ("v3 288 14/2 k5", 288, 14, 5, 2, "hardswish"), ("v3 576 7 k5", 576, 7, 5, 1, "hardswish"),
    ("v3 72 28/2", 72, 28, 3, 2, "relu"), ("v3 96 14", 96, 14, 3, 1, "hardswish"),
    ("b0 144 56/2 k5", 144, 56, 5, 2, "silu"), ("b0 240 28 k5", 240, 28, 5, 1, "silu"),
    ("b0 240 28/2", 240, 28, 3, 2, "silu"), ("b0 480 14", 480, 14, 3, 1, "silu"),
    ("b0 480 14 k5", 480, 14, 5, 1, "silu"), ("b0 672 14 k5", 672, 14, 5, 1, "silu"),
    ("b0 672 14/2 k5", 672, 14, 5, 2, "silu"), ("b0 1152 7 k5", 1152, 7, 5, 1, "silu"),
    ("b0 1152 7", 1152, 7, 3, 1, "silu"),
    # shapes of no model here: odd planes, 7x7 kernels
    ("odd 72 57/2 k5", 72, 57, 5, 2, "relu6"), ("odd 240 27 k5", 240, 27, 5, 1, "silu"),
    ("odd 64 40 k7", 64, 40, 7, 1, "relu"), ("odd 100 33/2 k7", 100, 33, 7, 2, "hardswish"),
]

def best_ms(fns, rounds):
    """``{name: best CPU ms}`` of each callable of ``fns``, called once per round in turns."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, np.inf)
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - t0)
    return {k: 1e3 * v for k, v in best.items()}


def measure(layer, batch, rounds, blocked=False):
    import torch

    from dualgraph.kernels import conv_direct
    from dualgraph.kernels.epilogue import ACTIVATIONS
    name, c, size, k, s, act = layer
    if blocked and c % 8:
        return
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, c, size, size), dtype=np.float32)
    w = rng.standard_normal((c, 1, k, k), dtype=np.float32) / k
    b = rng.standard_normal(c, dtype=np.float32)
    p = k // 2
    ho = (size + 2 * p - k) // s + 1
    out = np.empty((batch, c, ho, ho), np.float32)
    code = ACTIVATIONS.index("clamp" if act == "relu6" else act)
    lo, hi = (0.0, 6.0) if act == "relu6" else (-np.inf, np.inf)
    tx, tw, tb = map(torch.tensor, (x, w, b))
    f = torch.nn.functional
    tact = {"relu": f.relu, "relu6": f.relu6, "silu": f.silu, "hardswish": f.hardswish}[act]

    def ours():
        conv_direct.conv(x, w, out, (s, s), ((p, p), (p, p)), (1, 1), c, b, None, 0, code,
                         lo, hi)
    if blocked:
        from dualgraph.kernels import conv_blocked
        xb = conv_blocked.block(x)
        run = conv_blocked.fitted_depthwise(xb.shape, w.shape, (s, s), ((p, p), (p, p)),
                                            (1, 1), act=code, lo=lo, hi=hi)
        out = np.empty((batch, c // 8, ho, ho, 8), np.float32)

        def ours():
            run(xb, w, b, out=out)

    def run_torch():
        with torch.no_grad():
            return tact(f.conv2d(tx, tw, tb, s, p, 1, c))
    fns = {"dualgraph": ours, "onnxruntime": onnxruntime_conv(x, w, s, p, c, bias=b, act=act),
           "torch": run_torch}
    ms = best_ms(fns, rounds)
    ours_ms, ort_ms, torch_ms = ms["dualgraph"], ms["onnxruntime"], ms["torch"]
    print(f"{name:16s} b{batch:<3d} dualgraph {ours_ms:7.3f}  ort {ort_ms:7.3f}  torch "
          f"{torch_ms:7.3f}  /ort {ours_ms / ort_ms:4.2f}  /torch {ours_ms / torch_ms:4.2f}",
          flush=True)


def run_layers(argv, doc, layers, measure, rounds, options=()):
    """The command line of a per-layer table: ``measure(layer, batch, rounds, **flags)``
    for each batch of ``--batches`` and each of ``layers`` whose name holds a given part,
    ``flags`` the ``--NAME`` switches of ``options`` given."""
    import torch
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--rounds", type=int, default=rounds)
    for name in options:
        parser.add_argument(f"--{name}", action="store_true")
    parser.add_argument("parts", nargs="*")
    args = parser.parse_args(argv)
    flags = {name: getattr(args, name) for name in options}
    torch.set_num_threads(1)
    print(f"load average {os.getloadavg()[0]:.1f}; best CPU ms of {args.rounds}, one thread")
    for batch in map(int, args.batches.split(",")):
        for layer in layers:
            if not args.parts or any(part in layer[0] for part in args.parts):
                measure(layer, batch, args.rounds, **flags)


def main(argv=None):
    run_layers(argv, __doc__, LAYERS, measure, 5, options=("blocked",))


if __name__ == "__main__":
    sys.exit(main())
