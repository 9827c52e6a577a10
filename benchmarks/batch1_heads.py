"""Batch-1 stacks of linear layers with an activation other than ReLU (a classifier head's
``Linear -> Hardswish -> Linear``, an MLP with GELU or SiLU), for inference, one thread per
engine: dualgraph (``dg.compile``d under ``no_grad``, and the torch export loaded with
``dg.onnx.load``) against onnxruntime and torch eager, as ``benchmarks.unseen_cnns``
measures its CNNs, but each timing a run of ``CALLS`` calls (a call is too short to time
alone): best CPU time of a call in us over the rounds, the engines in turns, ratios to
onnxruntime, outputs compared with torch's.

``python -m benchmarks.batch1_heads [--acts hardswish,gelu,silu] [--widths 300,500,200,10]
[--rounds 7]``. A call is a few products of a few hundred thousand weights, tens of
microseconds: what each compiled node costs besides its product shows here (the
``linear_epilogue`` that joins a product with its activation runs fitted at batch 1).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "DUALGRAPH_NUM_THREADS"):
    os.environ[_name] = "1"

import numpy as np  # noqa: E402

from .common import random_state  # noqa: E402
from .unseen_cnns import engines  # noqa: E402

CALLS = 200
ACTS = {"hardswish": "Hardswish", "gelu": "GELU", "silu": "SiLU", "sigmoid": "Sigmoid"}


def mlp(lib, widths, act: str):
    """Linear layers of ``widths``, each but the last followed by the activation."""
    nn, layers = lib.nn, []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(getattr(nn, ACTS[act])())
    return nn.Sequential(*layers).eval()


def measure(act: str, widths, rounds: int) -> dict:
    import torch

    import dualgraph as dg
    torch.set_num_threads(1)
    dg.set_num_threads(1)
    reference = mlp(torch, widths, act)
    state = random_state(reference, 0)
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model = mlp(dg, widths, act)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    x = np.random.default_rng(0).standard_normal((1, widths[0])).astype(np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        impls = engines(reference, model, x, os.path.join(tmp, f"{act}.onnx"), 1)
    best = {k: np.inf for k in impls}
    for _ in range(rounds):
        for k, (call, _) in impls.items():
            call()
            start = time.process_time()
            for _ in range(CALLS):
                call()
            best[k] = min(best[k], (time.process_time() - start) / CALLS)
    want = impls["torch_eager"][1]
    return {k: dict(cpu_us=round(1e6 * best[k], 1),
                    vs_onnxruntime=round(best[k] / best["onnxruntime"], 2),
                    max_error=float(np.abs(out - want).max())) for k, (_, out) in impls.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acts", default="hardswish,gelu,silu")
    parser.add_argument("--widths", default="300,500,200,10")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")]
    print(f"load average {os.getloadavg()[0]:.1f}, one thread per engine", flush=True)
    for act in args.acts.split(","):
        for engine, row in measure(act, widths, args.rounds).items():
            print(f"{act} {'x'.join(map(str, widths))} {engine}: {row}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
