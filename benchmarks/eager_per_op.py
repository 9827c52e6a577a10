"""The cost of one small eager op, dualgraph against torch: ``python -m
benchmarks.eager_per_op [CASE ...]``.

Each case runs on 16-element (or 4x8) float32 tensors, so the time is the framework's own
work per op (dispatch, the tape, the backward engine), not arithmetic: ``a + b``, ``a * 2``,
``a.sum()``, ``F.relu(a)``, ``m[0]`` and ``m.view(8, 4)``, each without (``n``) and with
(``g``) ``requires_grad``; then forward and backward of a tiny ``Linear``, an ``LSTMCell``
step and a 20-step chain of W6's update. One thread everywhere; the best process CPU time
of 5 repeats of each, the two frameworks in turns. Arguments keep only the cases whose
name contains one of them.
"""
from __future__ import annotations

import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "DUALGRAPH_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402  (after the thread settings)


def cases(lib, nn, F) -> dict:
    """``{name: fn}`` for library ``lib`` (dualgraph or torch) with its ``nn`` and
    ``nn.functional``."""
    rng = np.random.default_rng(0)
    out = {}
    for grad in (False, True):
        a, b = (lib.tensor(rng.random(16, np.float32), requires_grad=grad) for _ in range(2))
        m = lib.tensor(rng.random((4, 8), np.float32), requires_grad=grad)
        tag = "g" if grad else "n"
        out.update({f"a+b {tag}": lambda a=a, b=b: a + b, f"a*2 {tag}": lambda a=a: a * 2,
                    f"sum {tag}": lambda a=a: a.sum(), f"relu {tag}": lambda a=a: F.relu(a),
                    f"m[0] {tag}": lambda m=m: m[0], f"view {tag}": lambda m=m: m.view(8, 4)})
    lib.manual_seed(0)
    linear, cell = nn.Linear(8, 8), nn.LSTMCell(8, 8)
    x = lib.tensor(rng.random((4, 8), np.float32))
    h, c = lib.zeros(4, 8), lib.zeros(4, 8)
    w = lib.tensor(rng.random(16, np.float32), requires_grad=True)

    def chain():
        y = w
        for _ in range(20):
            y = y * 0.999 + 0.001 * lib.sin(y)
        y.sum().backward()

    def lstm():
        h2, c2 = cell(x, (h, c))
        (h2.sum() + c2.sum()).backward()
    out.update({"linear f+b": lambda: linear(x).sum().backward(), "lstmcell f+b": lstm,
                "chain20 f+b": chain})
    return out


def best_us(fn, calls: int, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return best * 1e6


def main(selected) -> None:
    import torch
    import torch.nn.functional as TF

    import dualgraph as dg
    import dualgraph.nn.functional as DF
    torch.set_num_threads(1)
    mine, theirs = cases(dg, dg.nn, DF), cases(torch, torch.nn, TF)
    print(f"{'case':14s} {'dualgraph us':>12s} {'torch us':>9s}  ratio")
    for name, fn in mine.items():
        if selected and not any(s in name for s in selected):
            continue
        calls = 200 if "f+b" in name else 2000
        d, t = best_us(fn, calls), best_us(theirs[name], calls)
        print(f"{name:14s} {d:12.2f} {t:9.2f}  {d / t:5.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
