"""Per-call cost of a compiled function whose graph has symbolic dims (automatic dynamic
dims after a length changed, or ``dynamic=True``) against the same function's static
graph: ``python -m benchmarks.dynamic_calls [--calls 2000] [--rounds 5]``.

Three ways to run the same call, interleaved round by round, each its best round's CPU time
per call (``time.process_time``, run with one thread): ``static`` (compiled with
``dynamic=False`` and called at one size), ``symbolic`` (the graph traced with the batch
dim symbolic, its calls through the inlined fast path, capture/fastpath.py) and
``symbolic, general path`` (the same graph with the fast path switched off: the guards
as tuples, the executable's own type check). Two functions: a small MLP's inference
(16-32-32-4 at batch 2, where the call's overhead is most of it) and its SGD-momentum
training step. Not a workload of the suite (no peers).
"""
from __future__ import annotations

import argparse
import os
import sys

if __name__ == "__main__":   # before NumPy loads OpenBLAS
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
        os.environ[_name] = "1"

import time  # noqa: E402

import numpy as np  # noqa: E402


def build(dg, kind: str, dynamic):
    """``(compiled function, its arguments)`` for ``kind`` ("infer" or "train")."""
    dg.manual_seed(0)
    nn = dg.nn
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 4))
    opt = dg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def infer(x):
        with dg.no_grad():
            return model(x)

    def train(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    fn = dg.compile(infer if kind == "infer" else train, dynamic=dynamic)
    rng = np.random.default_rng(0)

    def args(n):
        x = dg.tensor(rng.standard_normal((n, 16)).astype(np.float32))
        y = dg.tensor(rng.standard_normal((n, 4)).astype(np.float32))
        return (x,) if kind == "infer" else (x, y)
    for n in ((2, 2, 2) if dynamic is False else (3, 5, 4, 2, 2)):   # (symbolic from the 2nd)
        fn(*args(n))
    return fn, args(2)


def per_call_us(fn, args, calls: int, general: bool) -> float:
    t = time.process_time()
    for _ in range(calls):
        if general:
            fn._fast = None   # (the general path; it makes the fast call again after)
        fn(*args)
    return 1e6 * (time.process_time() - t) / calls


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args(argv)
    sys.path.insert(0, os.getcwd())
    import dualgraph as dg
    print(f"load average {os.getloadavg()[0]:.1f}; CPU us per call, best of "
          f"{opts.rounds} rounds of {opts.calls}")
    for kind in ("infer", "train"):
        variants = {"static": (build(dg, kind, False), False),
                    "symbolic": (build(dg, kind, None), False),
                    "symbolic, general path": (build(dg, kind, None), True)}
        symbolic = variants["symbolic"][0][0]
        assert "s0" in str(list(symbolic.cache)[-1][1]), symbolic.explain()   # (the graph)
        best = dict.fromkeys(variants, float("inf"))
        for _ in range(opts.rounds):
            for name, ((fn, args), general) in variants.items():
                best[name] = min(best[name], per_call_us(fn, args, opts.calls, general))
        print(f"{kind}: " + ", ".join(f"{name} {us:.1f}" for name, us in best.items()))


if __name__ == "__main__":
    main()
