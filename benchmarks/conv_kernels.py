"""Micro-benchmark: conv2d and max_pool2d forward + backward, dualgraph vs torch (eager, CPU).

Run ``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python -m benchmarks.conv_kernels``. The
layers are LeNet's: the kernels' cost is im2col + one GEMM, so these show how far NumPy +
BLAS are from torch's native kernels. Times are the best of 20 in process CPU time, which a
busy machine disturbs less than wall time (single-threaded, the two agree).
"""
from __future__ import annotations

import time

import numpy as np
import torch

import dualgraph as dg

LAYERS = [  # name, input shape, weight shape, padding
    ("conv1 1->6 28x28 k5 p2", (64, 1, 28, 28), (6, 1, 5, 5), 2),
    ("conv2 6->16 14x14 k5", (64, 6, 14, 14), (16, 6, 5, 5), 0),
]
POOLS = [("maxpool 2x2 64x6x28x28", (64, 6, 28, 28)), ("maxpool 2x2 64x16x10x10",
                                                          (64, 16, 10, 10))]


def best_ms(fn, repeat=20):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return 1e3 * min(times)


def step(lib, f, args, layer):
    def run():
        for t in args:
            t.grad = None
        out = layer(f, *args)
        out.backward(lib.ones_like(out))
    return run


def compare(name, arrays, layer):
    t_args = [torch.tensor(a, requires_grad=True) for a in arrays]
    d_args = [dg.tensor(a, requires_grad=True) for a in arrays]
    ms_fwd_d = best_ms(lambda: layer(dg.nn.functional, *[t.detach() for t in d_args]))
    ms_fwd_t = best_ms(lambda: layer(torch.nn.functional, *[t.detach() for t in t_args]))
    ms_d = best_ms(step(dg, dg.nn.functional, d_args, layer))
    ms_t = best_ms(step(torch, torch.nn.functional, t_args, layer))
    print(f"{name:26s} fwd {ms_fwd_d:7.2f} ms vs torch {ms_fwd_t:6.2f} ms | fwd+bwd "
          f"{ms_d:7.2f} ms vs torch {ms_t:6.2f} ms ({ms_d / ms_t:4.1f}x)")


def main():
    rng = np.random.default_rng(0)
    print(f"torch threads: {torch.get_num_threads()}")
    for name, xs, ws, pad in LAYERS:
        arrays = [rng.standard_normal(s).astype(np.float32) for s in (xs, ws, ws[:1])]
        compare(name, arrays, lambda f, x, w, b, pad=pad: f.conv2d(x, w, b, padding=pad))
    for name, xs in POOLS:
        arrays = [rng.standard_normal(xs).astype(np.float32)]
        compare(name, arrays, lambda f, x: f.max_pool2d(x, 2))


if __name__ == "__main__":
    main()
