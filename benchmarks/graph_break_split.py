"""A training step with a debugging print in its forward, split at the graph break, against
the same step run eagerly (what a graph break cost before: the whole function fell back to
eager) and against the step without the print, compiled whole: ``python -m
benchmarks.graph_break_split``.

Three models, SGD with momentum: W1's MLP (784-512-512-10, batch 128: matrix products
dominate), a small MLP (32-64-64-10, batch 16: the per-call cost of dualgraph's Python
dominates) and a small CNN (two 3x3 convolutions with ReLU and max-pooling, 3x32x32
images, batch 32). The print writes ``h.mean()`` of the first layer's output to a string
buffer. A split step traces its Python at every call (capture/split.py), so its cost over
the unsplit compiled step is that trace, the pieces' launches and the print itself.
The variants run interleaved, round by round; each reports its best round (the median
step of ``--steps``) in CPU time of the process (less sensitive than the wall clock to
other programs on a shared machine; run with ``OPENBLAS_NUM_THREADS=1`` so that it is one
thread's), and the ratios to eager. Not a workload of the suite (no peers).
"""
from __future__ import annotations

import argparse
import io
import time
import warnings

import numpy as np

MODELS = {"w1_mlp": (("mlp", 784, 512, 512, 10), 128),
          "small_mlp": (("mlp", 32, 64, 64, 10), 16),
          "small_cnn": (("cnn", 3, 16, 32, 10), 32)}
VARIANTS = ("eager", "split", "whole")   # eager fallback, split at the print, no print


def layers(nn, kind, *sizes):
    """The model's blocks: the print follows the first."""
    if kind == "mlp":
        blocks = [nn.Sequential(nn.Linear(a, b), nn.ReLU()) for a, b in zip(sizes, sizes[1:])]
        blocks[-1] = blocks[-1][0]
        return blocks
    channels, c1, c2, classes = sizes
    return [nn.Sequential(nn.Conv2d(channels, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
            nn.Sequential(nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
            nn.Sequential(nn.Flatten(), nn.Linear(c2 * 8 * 8, classes))]


def build(dg, spec, batch, variant):
    """The step of ``variant`` and its arguments (same weights and data for all)."""
    nn = dg.nn
    dg.manual_seed(0)
    sink = io.StringIO()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(layers(nn, *spec))

        def forward(self, x):
            for i, block in enumerate(self.blocks):
                x = block(x)
                if i == 0 and variant != "whole":
                    print("h", x.mean(), file=sink)   # the debugging line
            return x

    model = Net()
    opt = dg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    rng = np.random.default_rng(0)
    shape = (batch, spec[1]) if spec[0] == "mlp" else (batch, spec[1], 32, 32)
    x = dg.tensor(rng.standard_normal(shape).astype(np.float32))
    y = dg.tensor(rng.integers(0, spec[-1], batch))
    return (step if variant == "eager" else dg.compile(step)), x, y


def main():
    import dualgraph as dg
    from dualgraph.capture import split
    # (time the split itself: by default a split function is timed against eager after its
    # first calls, and the faster kept)
    split.COMPARE_AFTER = float("inf")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for name, (spec, batch) in MODELS.items():
        steps = {v: build(dg, spec, batch, v) for v in VARIANTS}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for fn, x, y in steps.values():   # (warm-up: traces, compiles, kernels)
                for _ in range(5):
                    fn(x, y)
            best = dict.fromkeys(VARIANTS, float("inf"))
            for _ in range(args.rounds):
                for v, (fn, x, y) in steps.items():
                    times = []
                    for _ in range(args.steps):
                        start = time.process_time()
                        fn(x, y)
                        times.append(time.process_time() - start)
                    best[v] = min(best[v], float(np.median(times)))
        pieces = sum(". compiled piece" in line for line in steps["split"][0].explain()
                     .splitlines())
        print(f"{name}: eager (the fallback) {best['eager'] * 1e3:.2f} ms, split at the print "
              f"{best['split'] * 1e3:.2f} ms ({pieces} pieces compiled), compiled without "
              f"the print {best['whole'] * 1e3:.2f} ms; eager / split "
              f"{best['eager'] / best['split']:.2f}x, eager / whole "
              f"{best['eager'] / best['whole']:.2f}x")


if __name__ == "__main__":
    main()
