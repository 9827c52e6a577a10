"""3-D convolution and grid sampling (issue 24's composites of 2-D ops and gathers)
against torch eager, forward and backward, one thread per engine.

``OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 DUALGRAPH_NUM_THREADS=1 python -m
benchmarks.spatial_ops``. Each case is a step ``y = f(x, w); y.sum().backward()`` run by
torch, by dualgraph eagerly and by dualgraph under ``dg.compile``, in turns, five rounds;
reported: the best process CPU time per call and the ratio to torch's.
"""
from __future__ import annotations

import time

import numpy as np
import torch

import dualgraph as dg

RNG = np.random.default_rng(0)


def _cpu(f, n):
    start = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - start) / n


def case(name, make, n):
    fns = {"torch": make(torch), "eager": make(dg), "compiled": make(dg, compiled=True)}
    best = dict.fromkeys(fns, float("inf"))
    for f in fns.values():
        f()
        f()
    for _ in range(5):
        for k, f in fns.items():
            best[k] = min(best[k], _cpu(f, n))
    base = best["torch"]
    print(f"{name}: torch {base * 1e3:.2f} ms, dualgraph eager {best['eager'] * 1e3:.2f} ms "
          f"({best['eager'] / base:.2f}x), compiled {best['compiled'] * 1e3:.2f} ms "
          f"({best['compiled'] / base:.2f}x)")


def conv3d(shape, wshape, **kw):
    x0 = RNG.standard_normal(shape).astype(np.float32)
    w0 = RNG.standard_normal(wshape).astype(np.float32)

    def make(lib, compiled=False):
        x, w = lib.tensor(x0, requires_grad=True), lib.tensor(w0, requires_grad=True)

        def step(x, w):
            y = lib.nn.functional.conv3d(x, w, **kw)
            y.sum().backward()
            return y
        f = dg.compile(step) if compiled else step
        return lambda: f(x, w)
    return make


def grid_sample(n, c, h, w):
    x0 = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    t0 = (np.eye(2, 3)[None] * 0.9 + RNG.normal(0, 0.05, (n, 2, 3))).astype(np.float32)

    def make(lib, compiled=False):
        x, t = lib.tensor(x0, requires_grad=True), lib.tensor(t0, requires_grad=True)

        def step(x, t):
            F = lib.nn.functional
            grid = F.affine_grid(t, (n, c, h, w), align_corners=False)
            y = F.grid_sample(x, grid, align_corners=False)
            y.sum().backward()
            return y
        f = dg.compile(step) if compiled else step
        return lambda: f(x, t)
    return make


if __name__ == "__main__":
    torch.set_num_threads(1)
    case("conv3d (8,16,16,32,32) k3 p1 -> 32 channels", conv3d((8, 16, 16, 32, 32),
                                                              (32, 16, 3, 3, 3), padding=1), 2)
    case("conv3d (2,4,9,20,20) k(3,5,5) s2 -> 8 channels", conv3d((2, 4, 9, 20, 20),
                                                                 (8, 4, 3, 5, 5), stride=2), 20)
    case("affine_grid + grid_sample (32,3,64,64)", grid_sample(32, 3, 64, 64), 10)
    case("affine_grid + grid_sample (8,1,28,28)", grid_sample(8, 1, 28, 28), 50)
