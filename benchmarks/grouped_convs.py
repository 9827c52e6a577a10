"""Micro-benchmark: grouped (not depthwise) 3x3 convolutions, one layer at a time, on the
packed loop (``conv2d_packed`` with ``groups``, the weight packed once) against the direct
loop (``conv2d_epilogue``'s kernel, ``kernels/conv_direct.py``), onnxruntime's Conv + Relu
and torch eager: where ``kernels.conv_packed.groups_fit`` should take a grouped conv.

``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 DUALGRAPH_NUM_THREADS=1 python -m
benchmarks.grouped_convs [--batches 1,16]``. The layers: RegNetX-400MF's grouped 3x3s
(groups of 16 channels), group widths 16 and 32 on 14x14 to 56x56 planes, and group
widths 4, 8, 24 and 40 (not a multiple of sixteen) on 28x28 and 56x56 (stride 2) planes.
Times: best process CPU time over 3 rounds of 3 calls, the engines in turns
(``dense_convs.best_ms``).
Each line: the layer, whether ``groups_fit`` takes it, the times in ms.
"""
from __future__ import annotations

import argparse

import numpy as np

from .conv_kernels import onnxruntime_conv
from .dense_convs import best_ms

# name, channels, group width, input size, stride
LAYERS = [("regnet 32/2", 32, 16, 112, 2), ("regnet 64/2", 64, 16, 56, 2),
          ("regnet 64", 64, 16, 28, 1), ("regnet 160/2", 160, 16, 28, 2),
          ("regnet 160", 160, 16, 14, 1), ("regnet 384/2", 384, 16, 14, 2),
          ("regnet 384", 384, 16, 7, 1)]
LAYERS += [(f"128 g{gw} {s}x{s}", 128, gw, s, 1) for s in (14, 28, 56) for gw in (16, 32)]
# group widths not a multiple of sixteen (the last pair of a group partly idle)
LAYERS += [(f"{c} g{gw} {s}x{s}{'/2' if st == 2 else ''}", c, gw, s, st)
           for c, gw in ((128, 8), (192, 24), (240, 40), (256, 4))
           for s, st in ((28, 1), (56, 2))]


def measure(c, width, size, stride, batch) -> dict:
    import torch

    from dualgraph.kernels import conv_packed
    from dualgraph.ops.epilogue import CONV2D_EPILOGUE, _packed_run
    rng = np.random.default_rng(0)
    groups = c // width
    x = rng.standard_normal((batch, c, size, size), dtype=np.float32)
    w = (rng.standard_normal((c, width, 3, 3)) / np.sqrt(width * 9)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    attrs = dict(stride=(stride, stride), padding=((1, 1), (1, 1)), dilation=(1, 1))
    run = _packed_run(x.shape, False, "relu", (-np.inf, np.inf), None, (3, 3), c,
                      groups=groups, **attrs)
    wp = conv_packed.pack(w, groups)
    tx, tw, tb = map(torch.tensor, (x, w, b))

    def torch_conv():
        with torch.no_grad():
            return torch.relu(torch.nn.functional.conv2d(tx, tw, tb, stride, 1, 1, groups))
    calls = {"packed": lambda: run(x, wp, b),
             "direct": lambda: CONV2D_EPILOGUE.kernel(x, w, b, act="relu",
                                                      bounds=(-np.inf, np.inf),
                                                      residual_at=None, groups=groups,
                                                      **attrs),
             "ort": onnxruntime_conv(x, w, stride, 1, groups, bias=b, act="relu"),
             "torch": torch_conv}
    want = torch_conv().numpy()
    for k in ("packed", "direct"):
        error = np.abs(calls[k]() - want).max() / np.abs(want).max()
        assert error < 1e-5, f"{k} and torch differ by {error:.1e}"
    ms = best_ms(calls)
    ms["taken"] = conv_packed.packed_wins(x.shape, w.shape, attrs["padding"], groups,
                                          x.dtype)
    return ms


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", default="1,16")
    args = parser.parse_args(argv)
    for batch in map(int, args.batches.split(",")):
        for name, c, width, size, stride in LAYERS:
            ms = measure(c, width, size, stride, batch)
            times = " ".join(f"{k} {v:.3f}" for k, v in ms.items() if k != "taken")
            print(f"b{batch} {name}: packed taken {ms['taken']}: {times}", flush=True)


if __name__ == "__main__":
    main()
