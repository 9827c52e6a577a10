"""Ops at the sizes real programs call them, dualgraph eager against torch eager:
``python -m benchmarks.eager_op_sweep [CASE ...]``.

Each case is one op's forward and ``out.sum().backward()`` (or the forward alone, for ops
without a gradient) on float32 tensors of the programs' larger shapes (8x64x32x32
activations, 64x512 index ops), from the same NumPy draws in both frameworks. One thread
everywhere; the best process CPU time of ``--repeats`` calls, the two frameworks in turns
per case, in us, and dualgraph's ratio. Arguments keep only the cases whose name contains
one of them. Where the per-op path is what matters, see ``benchmarks.eager_per_op``.
"""
from __future__ import annotations

import argparse
import os
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "DUALGRAPH_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402  (after the thread settings)

ACT = (8, 64, 32, 32)
SMALL = (8, 64, 16, 16)


def cases(lib, F) -> dict:
    """``{name: (fn, args)}``: ``fn(*args)`` returns the output whose sum is differentiated
    (args made by ``lib`` from one seed, so both frameworks see the same numbers)."""
    rng = np.random.default_rng(0)

    def t(shape, grad=True, low=-2.0, high=2.0):
        return lib.tensor(rng.uniform(low, high, shape).astype(np.float32),
                          requires_grad=grad)

    def idx(shape, high):
        return lib.tensor(rng.integers(0, high, shape))

    a = t(ACT)
    s = t(SMALL)
    m = t((64, 512))
    return {
        "elu": (F.elu, (a,)),
        "softplus": (F.softplus, (a,)),
        "leaky_relu 0.2": (lambda x: F.leaky_relu(x, 0.2), (a,)),
        "sigmoid": (lib.sigmoid, (a,)),
        "silu": (F.silu, (a,)),
        "gelu": (F.gelu, (a,)),
        "tanh": (lib.tanh, (a,)),
        "bce_with_logits": (lambda x, y: F.binary_cross_entropy_with_logits(x, y),
                            (a, t(ACT, False, 0.0, 1.0))),
        "group_norm 8": (lambda x: F.group_norm(x, 8), (s,)),
        "nearest x2": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
                       (t((8, 32, 16, 16)),)),
        "max(1) 8x64x1024": (lambda x: x.max(1)[0], (t((8, 64, 1024)),)),
        "amax(1) 8x64x1024": (lambda x: x.amax(1), (t((8, 64, 1024)),)),
        "max(-1) 64x512": (lambda x: x.max(-1)[0], (m,)),
        "unfold 3 pad 1": (lambda x: F.unfold(x, 3, padding=1), (t((8, 32, 16, 16)),)),
        "gather dim 1": (lambda x, i: x.gather(1, i), (m, idx((64, 512), 512))),
        "scatter_add dim 1": (lambda x, i, v: x.scatter_add(1, i, v),
                              (m, idx((64, 512), 512), t((64, 512)))),
        "index_add dim 0": (lambda x, i, v: x.index_add(0, i, v),
                            (t((512, 64)), idx((256,), 512), t((256, 64)))),
        "cumsum dim 1": (lambda x: x.cumsum(1), (m,)),
        "cumsum dim 0": (lambda x: x.cumsum(0), (t((512, 64)),)),
        "softmax dim 1": (lambda x: F.softmax(x, dim=1), (t((8, 64, 256)),)),
        "log_softmax -1": (lambda x: F.log_softmax(x, dim=-1), (t((512, 256)),)),
        "pad 1": (lambda x: F.pad(x, (1, 1, 1, 1)), (s,)),
        "cat dim 1": (lambda x, y: lib.cat([x, y], 1), (s, t(SMALL))),
        "add (64,1,1)": (lambda x, b: x + b, (s, t((64, 1, 1)))),
        "mul (8,64,1,1)": (lambda x, b: x * b, (s, t((8, 64, 1, 1)))),
        "mean(-1,-2)": (lambda x: x.mean((-1, -2)), (a,)),
        "std(1)": (lambda x: x.std(1), (t((8, 64, 256)),)),
        "lgamma": (lib.lgamma, (t((64, 512), True, 0.1, 5.0),)),
        "digamma": (lib.digamma, (t((64, 512), True, 0.1, 5.0),)),
        "erfinv": (lib.erfinv, (t((64, 512), True, -0.9, 0.9),)),
    }


def best_us(fn, args, repeats: int) -> float:
    grad = any(getattr(x, "requires_grad", False) for x in args)
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        out = fn(*args)
        if grad:
            out.sum().backward()
        best = min(best, time.process_time() - start)
    for x in args:
        if getattr(x, "grad", None) is not None:
            x.grad = None
    return best * 1e6


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eager_op_sweep")
    parser.add_argument("cases", nargs="*", help="keep cases whose name contains one")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--turns", type=int, default=2,
                        help="dualgraph and torch alternate this many times per case")
    args = parser.parse_args(argv)
    import torch
    import torch.nn.functional as TF

    import dualgraph as dg
    import dualgraph.nn.functional as DF
    torch.set_num_threads(1)
    mine, theirs = cases(dg, DF), cases(torch, TF)
    print(f"{'case':20s} {'dualgraph us':>12s} {'torch us':>9s}  ratio")
    for name, (fn, fargs) in mine.items():
        if args.cases and not any(s in name for s in args.cases):
            continue
        tfn, targs = theirs[name]
        d = t = float("inf")
        for _ in range(args.turns):
            d = min(d, best_us(fn, fargs, args.repeats))
            t = min(t, best_us(tfn, targs, args.repeats))
        print(f"{name:20s} {d:12.0f} {t:9.0f}  {d / t:5.2f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
