"""Mixed precision on the CPU: what a low-precision GEMM costs in NumPy, and what
``dg.autocast`` does to the digits demo's step time and final accuracy.

    python -m benchmarks.amp_digits                 # both parts
    python -m benchmarks.amp_digits --epochs 8 --skip-gemm

Part 1 times one square matrix product per dtype: float32 (BLAS sgemm), float16 (NumPy has
no half-precision BLAS: its own loops), bfloat16 (ml_dtypes' loops), and bfloat16 computed
as dualgraph's matmul kernel does it: the operands widened to float32, one sgemm, the
result rounded to bfloat16. Part 2 trains the demo's CNN (``dualgraph/demo.py``: two conv
blocks with batch norm, a two-layer classifier, Adam) on scikit-learn's 8x8 digits with the
same seed in float32 and under ``dg.autocast("cpu", dtype=bfloat16)``, eager and compiled,
and reports the median step time (the best of ``--rounds`` runs, taken in turns) and the
test accuracy after the last epoch (evaluated in the precision it trained in). Results go
to stdout as a table; docs/benchmarks.md quotes a run.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def _best_ms(fn, repeat: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def gemm(sizes=(64, 256, 512)) -> list[tuple]:
    """(n, float32 ms, float16 ms, bfloat16 ms, bfloat16-via-float32 ms) per size."""
    import ml_dtypes

    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
        h = [x.astype(np.float16) for x in (a, b)]
        z = [x.astype(ml_dtypes.bfloat16) for x in (a, b)]
        slow = max(1, 20 // (n // 64) ** 2)   # (the loops without BLAS take seconds)
        rows.append((n, _best_ms(lambda: a @ b, 20),
                     _best_ms(lambda: h[0] @ h[1], slow),
                     _best_ms(lambda: z[0] @ z[1], slow),
                     _best_ms(lambda: (z[0].astype(np.float32) @ z[1].astype(np.float32))
                              .astype(ml_dtypes.bfloat16), 20)))
    return rows


def train(low: str | None, compiled: bool, epochs: int, seed: int = 0) -> tuple:
    """(median step ms, final test accuracy) of the demo's CNN, in float32 (``low`` None)
    or under autocast to ``low``."""
    import dualgraph as dg
    from dualgraph import demo

    train_set, test_set = demo.load_data(seed, None)
    dg.manual_seed(seed)
    model = demo.make_model()
    optimizer = dg.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = dg.nn.CrossEntropyLoss()
    dtype = getattr(dg, low or "bfloat16")

    def region():
        return dg.autocast("cpu", dtype=dtype, enabled=low is not None)

    def step(x, y):
        with region():
            loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    run = dg.compile(step) if compiled else step
    loader = dg.utils.data.DataLoader(dg.utils.data.TensorDataset(*train_set),
                                      batch_size=32, shuffle=True, drop_last=True)
    times = []
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            start = time.perf_counter()
            run(x, y).item()
            times.append(time.perf_counter() - start)
    model.eval()
    with dg.no_grad(), region():
        accuracy = (model(test_set[0]).argmax(dim=1) == test_set[1]).float().mean().item()
    return statistics.median(times[len(times) // 4:]) * 1e3, accuracy


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.amp_digits")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--skip-gemm", action="store_true")
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--rounds", type=int, default=3,
                   help="train every configuration this many times, in turns; the step "
                        "time is the best round's median (a shared machine is noisy)")
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):   # (as the demo: one BLAS thread)
        if not args.skip_gemm:
            print("square matmul, one BLAS thread, best time (ms)")
            print(f"{'n':>5} {'float32':>9} {'float16':>9} {'bfloat16':>9} "
                  f"{'bf16 via f32':>13}")
            for n, f32, f16, bf16, via in gemm():
                print(f"{n:>5} {f32:>9.3f} {f16:>9.2f} {bf16:>9.2f} {via:>13.3f}")
        if not args.skip_train:
            print(f"\ndigits CNN, {args.epochs} epochs, batch 32, Adam")
            configs = [(low, compiled) for low in (None, "bfloat16")
                       for compiled in (False, True)]
            results = {c: [] for c in configs}
            for _ in range(args.rounds):
                for c in configs:
                    results[c].append(train(*c, args.epochs))
            print(f"{'precision':>10} {'mode':>9} {'step ms':>8} {'test acc':>9}")
            for (low, compiled), runs in results.items():
                ms = min(r[0] for r in runs)
                accs = sorted({r[1] for r in runs})   # (one value: every run is seeded)
                print(f"{low or 'float32':>10} {'compiled' if compiled else 'eager':>9} "
                      f"{ms:>8.2f} {', '.join(f'{a:.4f}' for a in accs):>9}")


if __name__ == "__main__":
    main()
