"""Micro-benchmark: an image's first convolution (at most four input channels: the stems of
ResNet, SqueezeNet, MobileNet, AlexNet, and odd shapes of no model) by each float32 loop
that can run it, with bias and ReLU: ``conv_shallow`` (rows of output positions in the
lanes, by six channels), ``conv_outlanes`` (where it takes the conv: few
weights a position), ``conv_packed`` on its weight packed once, against onnxruntime's
Conv + Relu; ``chosen`` is the loop a compiled graph with a constant weight runs
(``conv_shallow.wins``, else ``conv_packed.packed_wins``, else the epilogue op's own
choice).

``python -m benchmarks.stem_convs [--batches 1,16]``: one thread per engine. Times: best
process CPU time over 3 rounds of 3 calls, the engines in turns; each output checked
against onnxruntime's.
"""
from __future__ import annotations

import argparse
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

from .conv_kernels import onnxruntime_conv  # noqa: E402
from .dense_convs import best_ms  # noqa: E402

# name, input channels, output channels, kernel, stride, padding, plane (height, width)
LAYERS = [
    ("resnet 7x7/2", 3, 64, 7, 2, 3, (224, 224)),
    ("squeezenet 3x3/2", 3, 64, 3, 2, 0, (224, 224)),
    ("mobilenet 3x3/2", 3, 32, 3, 2, 1, (224, 224)),
    ("alexnet 11x11/4", 3, 64, 11, 4, 2, (224, 224)),
    ("odd 5x5 3->40", 3, 40, 5, 1, 2, (61, 67)),
    ("odd 7x7 1->32", 1, 32, 7, 1, 3, (48, 51)),
    ("odd 7x7/2 4->24", 4, 24, 7, 2, 3, (97, 101)),
]


def measure(cin, cout, k, stride, pad, plane, batch) -> dict:
    from dualgraph.kernels import conv_outlanes, conv_packed, conv_shallow
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, cin, *plane), dtype=np.float32)
    w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    hw = [(n + 2 * pad - k) // stride + 1 for n in plane]
    out = np.empty((batch, cout, *hw), np.float32)
    st, pd, dl = (stride, stride), ((pad, pad), (pad, pad)), (1, 1)
    packed, plan = conv_packed.pack(w), conv_packed.plan(x.shape, w.shape, hw, st, dl)
    calls = {"ort": onnxruntime_conv(x, w, stride, pad, 1, bias=b, act="relu"),
             "shallow": lambda: conv_shallow.conv(x, w, out, st, pd, dl, 1, b, act=1),
             "packed": lambda: conv_packed.conv(x, packed, out, st, pd, dl, b, (k, k), plan,
                                                act=1)}
    outlanes = conv_outlanes.wanted(x.shape, w.shape, pd, 1, np.float32)
    if outlanes:
        calls["outlanes"] = lambda: conv_outlanes.conv(x, w, out, st, pd, dl, 1, b, act=1)
    want = calls["ort"]()[0]
    for name, call in calls.items():
        if name != "ort":
            error = np.abs(call() - want).max() / np.abs(want).max()
            assert error < 1e-5, f"{name} differs from onnxruntime by {error:.1e}"
    ms = best_ms(calls)
    ms["chosen"] = ("shallow" if conv_shallow.wins(x.shape, w.shape, hw, st, pd, 1, np.float32)
                    else "packed" if conv_packed.packed_wins(x.shape, w.shape, pd, 1, np.float32)
                    else "outlanes" if outlanes else "shallow")
    return ms


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,16")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}; best CPU ms, ratio to onnxruntime")
    for name, *spec in LAYERS:
        for batch in map(int, args.batches.split(",")):
            m = measure(*spec, batch)
            loops = "  ".join(f"{k} {m[k]:7.3f} ({m[k] / m['ort']:4.2f})"
                              for k in ("shallow", "outlanes", "packed") if k in m)
            print(f"{name:18s} b{batch:<2d} ort {m['ort']:7.3f}  {loops}  chosen {m['chosen']}",
                  flush=True)


if __name__ == "__main__":
    main()
