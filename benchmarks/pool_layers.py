"""Micro-benchmark: pooling layers as compiled inference runs them (max pools' values alone,
``max_pool2d_values``: ``kernels/pooling.py``'s ``max_pool_values`` or, on short rows,
``max_pool_rows``; average pools by its ``avg_pool``), against NumPy's passes (the kernels
the loops replaced: ``DUALGRAPH_NUMBA=0``), onnxruntime's MaxPool / AveragePool node and
torch eager.

Run ``python -m benchmarks.pool_layers [--batches 1,16] [--rounds 7] [NAME-PART ...]`` (one
thread per engine). Times are the best process CPU time of ``--rounds`` calls, engines in
turns, as ``benchmarks.depthwise_layers``'.
"""
from __future__ import annotations

import os
import sys

# (depthwise_layers sets one thread per engine before NumPy loads)
from .depthwise_layers import best_ms, run_layers

import numpy as np  # noqa: E402

from .conv_kernels import onnxruntime_nodes  # noqa: E402

# name, channels, plane, kernel, stride, padding, dilation (0: an average pool, with
# count_include_pad), ceil mode (224x224 inputs)
LAYERS = [
    ("squeezenet1.0 96 109", 96, 109, 3, 2, 0, 1, True),
    ("squeezenet1.0 256 54", 256, 54, 3, 2, 0, 1, True),
    ("squeezenet1.0 512 27", 512, 27, 3, 2, 0, 1, True),
    ("squeezenet1.1 64 111", 64, 111, 3, 2, 0, 1, True),
    ("squeezenet1.1 128 55", 128, 55, 3, 2, 0, 1, True),
    ("resnet 64 112", 64, 112, 3, 2, 1, 1, False),
    ("vgg 64 224 k2", 64, 224, 2, 2, 0, 1, False),
    ("vgg 512 28 k2", 512, 28, 2, 2, 0, 1, False),
    ("googlenet 64 112", 64, 112, 3, 2, 0, 1, True),
    ("googlenet 480 28", 480, 28, 3, 2, 0, 1, True),
    ("googlenet 832 14", 832, 14, 3, 2, 0, 1, True),
    ("googlenet branch 256 28 s1", 256, 28, 3, 1, 1, 1, True),
    ("googlenet branch 512 14 s1", 512, 14, 3, 1, 1, 1, True),
    ("googlenet branch 832 7 s1", 832, 7, 3, 1, 1, 1, True),
    ("googlenet branch 480 14 s1", 480, 14, 3, 1, 1, 1, True),
    ("squeezenet1.1 256 27", 256, 27, 3, 2, 0, 1, True),
    ("densenet121 avg 128 56", 128, 56, 2, 2, 0, 0, False),
    ("densenet121 avg 256 28", 256, 28, 2, 2, 0, 0, False),
    ("densenet121 avg 512 14", 512, 14, 2, 2, 0, 0, False),
    ("densenet121 avg 1024 14 first", 1024, 14, 2, 2, 0, 0, False),   # (pool_before_conv's)
    # shapes of no model here: stride 1 (inception-like branch), dilation, odd planes
    ("odd 192 28 s1", 192, 28, 3, 1, 1, 1, False),
    ("odd 40 57 k3 d2", 40, 57, 3, 2, 1, 2, True),
    ("odd 24 13 k2 s1", 24, 13, 2, 1, 0, 1, False),
    ("odd avg 40 57 k3 s2 p1", 40, 57, 3, 2, 1, 0, True),
    ("odd avg 96 9 k3 s1 p1", 96, 9, 3, 1, 1, 0, False),
    ("odd 200 11 s1", 200, 11, 3, 1, 1, 1, False),
    ("odd 72 15 k2 s2", 72, 15, 2, 2, 0, 1, True),
]


def measure(layer, batch, rounds):
    import torch
    from onnx import helper

    from dualgraph.ops import conv as conv_ops
    from dualgraph.ops.epilogue import MAX_POOL2D_VALUES
    name, c, size, k, s, p, d, ceil = layer
    x = np.random.default_rng(0).standard_normal((batch, c, size, size), dtype=np.float32)
    tx = torch.tensor(x)
    if d:
        pool = dict(kernel_size=(k, k), stride=(s, s), padding=(p, p), dilation=(d, d),
                    ceil_mode=ceil)
        ours = lambda: MAX_POOL2D_VALUES.kernel(x, **pool)  # noqa: E731
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s],
                                pads=[p] * 4, dilations=[d, d], ceil_mode=int(ceil))
        peer = lambda: torch.nn.functional.max_pool2d(tx, k, s, p, d, ceil)  # noqa: E731
    else:
        pool = dict(kernel_size=(k, k), stride=(s, s), padding=(p, p), ceil_mode=ceil,
                    count_include_pad=True, divisor_override=None)
        ours = lambda: conv_ops.AVG_POOL2D.kernel(x, **pool)  # noqa: E731
        node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[k, k],
                                strides=[s, s], pads=[p] * 4, ceil_mode=int(ceil),
                                count_include_pad=1)
        peer = lambda: torch.nn.functional.avg_pool2d(tx, k, s, p, ceil)  # noqa: E731

    def numpy_passes():     # (NumPy's passes: the loops switched off)
        os.environ["DUALGRAPH_NUMBA"] = "0"
        try:
            return ours()
        finally:
            del os.environ["DUALGRAPH_NUMBA"]

    fns = {"dualgraph": ours, "numpy": numpy_passes,
           "onnxruntime": onnxruntime_nodes(x, [node]), "torch": peer}
    np.testing.assert_allclose(ours(), peer().numpy(), rtol=1e-6, atol=1e-6, err_msg=name)
    ms = best_ms(fns, rounds)
    ours = ms["dualgraph"]
    print(f"{name:26s} b{batch:<3d} dualgraph {ours:7.3f}  numpy {ms['numpy']:7.3f}  ort "
          f"{ms['onnxruntime']:7.3f}  torch {ms['torch']:7.3f}  /numpy {ours / ms['numpy']:4.2f}"
          f"  /ort {ours / ms['onnxruntime']:4.2f}  /torch {ours / ms['torch']:4.2f}", flush=True)


def main(argv=None):
    run_layers(argv, __doc__, LAYERS, measure, 7)


if __name__ == "__main__":
    sys.exit(main())
