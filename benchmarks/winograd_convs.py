"""Micro-benchmark: 3x3 stride-1 dense convolutions (with bias and ReLU, padding 1) by
Winograd's F(2x2, 3x3) (``kernels/conv_winograd.py`` on its weight transformed once)
against the packed direct loop (``kernels/conv_packed.py`` on its weight packed once: what
a compiled program ran before) and onnxruntime's Conv + Relu, on layers of VGG-style stacks
(56/28/14/7), a U-Net-style 64x64 layer, CIFAR-style 32/16/8 layers, odd sizes (13x13, 17
channels) and unequal channel counts, at batch 1 and 16; whether the cost rule
(``conv_winograd.faster``) takes each, and the error of each against torch in float64
(relative to the largest output).

``python -m benchmarks.winograd_convs [--batches 1,16]``: one thread per engine. Times:
best process CPU time over 3 rounds of 3 calls, the engines in turns.
"""
from __future__ import annotations

import argparse
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

from .conv_kernels import onnxruntime_conv  # noqa: E402
from .dense_convs import best_ms  # noqa: E402

LAYERS = [   # (input channels, output channels, plane)
    (64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7),      # VGG-style stacks
    (32, 32, 64),                                                       # U-Net-style
    (16, 16, 32), (32, 32, 16), (64, 64, 8),                            # CIFAR ResNet
    (17, 17, 13), (48, 48, 13), (96, 96, 20), (64, 128, 28), (128, 64, 28),
    (256, 256, 28), (128, 128, 14),
]


def measure(cin, cout, size, batch) -> dict:
    import torch

    from dualgraph.kernels import conv_packed, conv_winograd
    from dualgraph.ops.epilogue import _packed_run, _winograd_run
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, cin, size, size), dtype=np.float32)
    w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32)
    pad, inf = ((1, 1), (1, 1)), (-np.inf, np.inf)
    winograd = _winograd_run(x.shape, False, "relu", inf, None, pad)
    packed = _packed_run(x.shape, False, "relu", inf, None, (3, 3), cout, (1, 1), pad, (1, 1))
    u, wp = conv_winograd.transform_weight(w), conv_packed.pack(w)
    calls = {"winograd": lambda: winograd(x, u, b), "packed": lambda: packed(x, wp, b),
             "ort": onnxruntime_conv(x, w, 1, 1, 1, bias=b, act="relu")}
    want = torch.relu(torch.nn.functional.conv2d(
        *(torch.tensor(a, dtype=torch.float64) for a in (x, w, b)), padding=1)).numpy()
    ms = best_ms(calls)
    ms["error"] = {k: np.abs(np.asarray(f()) - want).max() / np.abs(want).max()
                   for k, f in calls.items() if k != "ort"}
    ms["taken"] = conv_winograd.faster(x.shape, w.shape, (size, size))
    return ms


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,16")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}; ms (one thread), ratios; "
          "'taken': the cost rule picks Winograd")
    for batch in map(int, args.batches.split(",")):
        for cin, cout, size in LAYERS:
            m = measure(cin, cout, size, batch)
            print(f"b{batch:<2d} {cin:3d}->{cout:<3d} {size:2d}x{size:<2d}  winograd "
                  f"{m['winograd']:7.3f} packed {m['packed']:7.3f} ort {m['ort']:7.3f}  "
                  f"win/packed {m['winograd'] / m['packed']:4.2f} win/ort "
                  f"{m['winograd'] / m['ort']:4.2f} packed/ort {m['packed'] / m['ort']:4.2f}"
                  f"  {'taken' if m['taken'] else '     '}  error win "
                  f"{m['error']['winograd']:.1e} packed {m['error']['packed']:.1e}",
                  flush=True)


if __name__ == "__main__":
    main()
