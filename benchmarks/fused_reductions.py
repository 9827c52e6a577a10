"""Micro-benchmark: compiled functions whose fused kernel ends in a reduction over rows
(sums and means, a max, a conv bias gradient's sum over N, H and W) or in a softmax or a
LayerNorm, float32 unless named: what the fused kernels' summation order costs. Run it
on two trees in turns to compare them (``PYTHONPATH`` on each).

``python -m benchmarks.fused_reductions [--rounds 3]``: one thread. Times: best process
CPU time a call over the rounds, after three warm-up calls (the compile).
"""
from __future__ import annotations

import argparse
import os
import time

os.environ["DUALGRAPH_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402

import dualgraph as dg  # noqa: E402
import dualgraph.nn.functional as F  # noqa: E402

# name: (function, shape, dtype)
CASES = {
    "row sum of x*y*1.5 256x1024": (lambda x, y: (x * y * 1.5).sum(dim=1), (256, 1024),
                                    np.float32),
    "row mean of (x-y)^2 1024x256": (lambda x, y: ((x - y) * (x - y)).mean(dim=1),
                                     (1024, 256), np.float32),
    "softmax of x*y 256x1024": (lambda x, y: F.softmax(x * y, dim=1), (256, 1024),
                                np.float32),
    "layer_norm of x+y 256x1024": (lambda x, y: F.layer_norm(x + y, (1024,)), (256, 1024),
                                   np.float32),
    "row amax of x*y 256x1024": (lambda x, y: (x * y).amax(dim=1), (256, 1024), np.float32),
    "sum of x*y over (0,2,3) 8x64x32x32": (lambda x, y: (x * y).sum(dim=(0, 2, 3)),
                                           (8, 64, 32, 32), np.float32),
    "row sum of x*y*1.5 256x1024 float64": (lambda x, y: (x * y * 1.5).sum(dim=1),
                                            (256, 1024), np.float64),
}


def best_us(fn, args, rounds: int) -> float:
    """The best CPU time of one call (microseconds) over ``rounds`` rounds of calls."""
    calls = max(20, int(2e7 // args[0].numel()))
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            fn(*args)
        best = min(best, (time.process_time() - start) / calls * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    rng = np.random.default_rng(0)
    for name, (fn, shape, dtype) in CASES.items():
        compiled = dg.compile(fn)
        args = [dg.tensor(rng.standard_normal(shape).astype(dtype)) for _ in range(2)]
        for _ in range(3):
            compiled(*args)
        print(f"{name:38s} {best_us(compiled, args, rounds):8.1f} us", flush=True)


if __name__ == "__main__":
    main()
