"""Micro-benchmark: the dense convolutions of three CNNs, one layer at a time, as the
compiled program runs them with a constant weight (``conv2d_packed``'s loop on the weight
packed once where ``kernels.conv_packed.packed_wins``, else ``conv2d_epilogue``'s kernel:
the conv, its bias and ReLU; column ``unpk``: ``conv2d_epilogue``'s kernel, as a weight
that is not constant runs), against onnxruntime running that one Conv + Relu, torch eager,
and the bare GEMM of the same size (``(Cout, C*kh*kw) @ (C*kh*kw, N*Ho*Wo)``, OpenBLAS through NumPy): how far each
layer is from the GEMM, and the GEMM from onnxruntime's whole conv.

``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 DUALGRAPH_NUM_THREADS=1 DUALGRAPH_CPU_TUNING=all
python -m benchmarks.dense_convs [PREFIX] [--batches 1,16]`` (``PREFIX`` picks layers by the
start of their name: ``r18``, ``sq``, ``mb``). ``DUALGRAPH_CPU_TUNING=all`` keeps freed
MB-sized buffers mapped, as a run of a whole model finds them: one layer called alone
page-faults its output in again at every call (0.5-3 ms on the stems). Times: best process
CPU time over 3 rounds of 3 calls, the engines in turns. Each line: the method, GFLOP, the
times in ms, the ratios to onnxruntime and GFLOP/s.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from .conv_kernels import onnxruntime_conv


def layer(name, cin, cout, k, stride, size, pad=None):
    return name, cin, cout, k, stride, size, k // 2 if pad is None else pad


LAYERS = [   # torchvision's ResNet-18, SqueezeNet 1.1 and MobileNetV2's 1x1s, at 224x224
    layer("r18 stem", 3, 64, 7, 2, 224), layer("r18 64", 64, 64, 3, 1, 56),
    layer("r18 64-128/2", 64, 128, 3, 2, 56), layer("r18 128", 128, 128, 3, 1, 28),
    layer("r18 1x1/2 128", 64, 128, 1, 2, 56), layer("r18 128-256/2", 128, 256, 3, 2, 28),
    layer("r18 256", 256, 256, 3, 1, 14), layer("r18 256-512/2", 256, 512, 3, 2, 14),
    layer("r18 512", 512, 512, 3, 1, 7),
    layer("sq stem", 3, 64, 3, 2, 224, 0), layer("sq 64-16", 64, 16, 1, 1, 55),
    layer("sq 16-64", 16, 64, 1, 1, 55), layer("sq 3x3 16-64", 16, 64, 3, 1, 55),
    layer("sq 3x3 32-128", 32, 128, 3, 1, 27), layer("sq 3x3 48-192", 48, 192, 3, 1, 13),
    layer("sq 3x3 64-256", 64, 256, 3, 1, 13), layer("sq classifier", 512, 1000, 1, 1, 13),
    layer("mb stem", 3, 32, 3, 2, 224), layer("mb 16-96", 16, 96, 1, 1, 112),
    layer("mb 24-144", 24, 144, 1, 1, 56), layer("mb 144-24", 144, 24, 1, 1, 56),
    layer("mb 32-192", 32, 192, 1, 1, 28), layer("mb 64-384", 64, 384, 1, 1, 14),
    layer("mb 96-576", 96, 576, 1, 1, 14), layer("mb 576-96", 576, 96, 1, 1, 14),
    layer("mb 160-960", 160, 960, 1, 1, 7), layer("mb 960-160", 960, 160, 1, 1, 7),
    layer("mb 320-1280", 320, 1280, 1, 1, 7),
]


def best_ms(calls: dict, rounds: int = 3, repeat: int = 3) -> dict:
    """``{name: best CPU ms}`` of each call, the calls in turns."""
    best = {k: np.inf for k in calls}
    for f in calls.values():
        f()
    for _ in range(rounds):
        for k, f in calls.items():
            for _ in range(repeat):
                start = time.process_time()
                f()
                best[k] = min(best[k], 1e3 * (time.process_time() - start))
    return best


def measure(name, cin, cout, k, stride, size, pad, batch) -> dict:
    import torch

    from dualgraph.kernels import conv_packed
    from dualgraph.ops import conv as conv_ops
    from dualgraph.ops.epilogue import CONV2D_EPILOGUE, _packed_run
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, cin, size, size), dtype=np.float32)
    w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    attrs = dict(stride=(stride, stride), padding=((pad, pad), (pad, pad)), dilation=(1, 1),
                 groups=1)
    out = (size + 2 * pad - k) // stride + 1
    a = np.ascontiguousarray(w.reshape(cout, -1))
    cols = rng.standard_normal((cin * k * k, batch * out * out), dtype=np.float32)
    ort = onnxruntime_conv(x, w, stride, pad, 1, bias=b, act="relu")
    tx, tw, tb = map(torch.tensor, (x, w, b))

    def torch_conv():
        with torch.no_grad():
            return torch.relu(torch.nn.functional.conv2d(tx, tw, tb, stride, pad))
    def unpacked():
        return CONV2D_EPILOGUE.kernel(x, w, b, act="relu", bounds=(-np.inf, np.inf),
                                      residual_at=None, **attrs)
    calls = {"dg": unpacked, "unpk": unpacked, "ort": ort, "torch": torch_conv,
             "gemm": lambda: a @ cols}
    packed = conv_packed.packed_wins(x.shape, w.shape, attrs["padding"], 1, x.dtype)
    if packed:
        run = _packed_run(x.shape, False, "relu", (-np.inf, np.inf), None, (k, k), cout,
                          attrs["stride"], attrs["padding"], attrs["dilation"])
        wp = conv_packed.pack(w)
        calls["dg"] = lambda: run(x, wp, b)
    error = np.abs(calls["dg"]() - ort()[0]).max() / np.abs(ort()[0]).max()
    assert error < 1e-5, f"{name}: dualgraph and onnxruntime differ by {error:.1e}"
    ms = best_ms(calls)
    ms["gflop"] = 2 * batch * cout * out * out * cin * k * k / 1e9
    ms["method"] = "packed" if packed else conv_ops.conv_method(x.shape, w.shape, **attrs)
    return ms


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefix", nargs="?", default="")
    parser.add_argument("--batches", default="1,16")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}; ms, ratios to onnxruntime, GFLOP/s")
    totals: dict = {}
    for spec in LAYERS:
        if not spec[0].startswith(args.prefix):
            continue
        for batch in map(int, args.batches.split(",")):
            m = measure(*spec, batch)
            ratios = "  ".join(f"{k}/ort {m[k] / m['ort']:4.2f}"
                               for k in ("dg", "unpk", "torch", "gemm"))
            rates = "  ".join(f"{k} {m['gflop'] / m[k] * 1e3:5.1f}" for k in ("dg", "ort", "gemm"))
            print(f"{spec[0]:16s} b{batch:<2d} {m['method']:9s} {m['gflop']:6.3f} GF  dg "
                  f"{m['dg']:7.3f} unpk {m['unpk']:7.3f} ort {m['ort']:7.3f} torch {m['torch']:7.3f} gemm "
                  f"{m['gemm']:7.3f}  {ratios}  GF/s {rates}", flush=True)
            total = totals.setdefault((spec[0].split()[0], batch), dict.fromkeys(m, 0.0))
            for k in ("dg", "unpk", "ort", "torch", "gemm"):
                total[k] += m[k]
    for (model, batch), t in totals.items():
        print(f"{model} batch {batch}: the layers' sum, dg/ort {t['dg'] / t['ort']:.2f}, "
              f"unpk/ort {t['unpk'] / t['ort']:.2f}, "
              f"torch/ort {t['torch'] / t['ort']:.2f}, gemm/ort {t['gemm'] / t['ort']:.2f}")


if __name__ == "__main__":
    main()
