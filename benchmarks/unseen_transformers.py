"""Transformers outside the suite (and W10's encoder measured the same way), for inference:
dualgraph (the module ``dg.compile``d and called under ``no_grad``; the torch export loaded
with ``dg.onnx.load``) against onnxruntime (the same export) and torch eager.

``python -m benchmarks.unseen_transformers [--models vit,encoder] [--batches 1,16]
[--rounds 5] [--threads 1]``. ``vit`` is a ViT-tiny-like model written as timm writes it
(16x16 patches of a 224x224 image by a strided convolution, a class token, 12 pre-LayerNorm
blocks of width 192 with 3 heads, the q/k/v heads taken by ``reshape``, ``permute`` and
``unbind``, an exact-GELU MLP of 768, a linear head on the class token); ``encoder`` is W10's
post-LayerNorm BERT-style encoder on int64 token ids. The same random weights in both
libraries. ``--threads`` is every engine's thread count (environment variables set before
NumPy loads). Each implementation runs once per round, in turns; reported: the best CPU time
of a call (``time.process_time``) and the best wall time, in ms, and each engine's ratio
to onnxruntime's CPU time. Outputs are compared with torch's.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def _threads(argv) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_known_args(argv)[0].threads


if __name__ == "__main__":   # before NumPy loads OpenBLAS
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
        os.environ[_name] = str(_threads(sys.argv[1:]))

import numpy as np  # noqa: E402

from .common import random_state  # noqa: E402


def vit(lib, image=224, patch=16, width=192, depth=12, heads=3, hidden=768, classes=1000):
    """A ViT-tiny-like classifier, its attention written as timm's ``Attention``."""
    nn = lib.nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.scale = (width // heads) ** -0.5

        def forward(self, x):
            b, n, c = x.shape
            qkv = self.qkv(x).reshape(b, n, 3, heads, c // heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            att = (q @ k.transpose(-2, -1)) * self.scale
            x = (att.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
            return self.proj(x)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(width, eps=1e-6)
            self.attn = Attention()
            self.norm2 = nn.LayerNorm(width, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.GELU(),
                                     nn.Linear(hidden, width))

        def forward(self, x):
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patches = nn.Conv2d(3, width, patch, patch)
            self.cls = nn.Parameter(lib.zeros(1, 1, width))
            self.pos = nn.Parameter(lib.zeros(1, (image // patch) ** 2 + 1, width))
            self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
            self.norm = nn.LayerNorm(width, eps=1e-6)
            self.head = nn.Linear(width, classes)

        def forward(self, x):
            x = self.patches(x).flatten(2).transpose(1, 2)
            x = lib.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
            x = self.norm(self.blocks(x))
            return self.head(x[:, 0])
    return ViT()


def encoder(lib):
    from .w10_encoder_infer import encoder as w10
    return w10(lib)


def example(name: str, batch: int, rng) -> np.ndarray:
    if name == "vit":
        return rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
    from .w10_encoder_infer import SEQ, VOCAB
    return rng.integers(0, VOCAB, (batch, SEQ)).astype(np.int64)


MODELS = {"vit": vit, "encoder": encoder}


def implementations(name: str, batch: int, threads: int, tmp: str) -> dict:
    """``{engine: (call, output of one call)}`` for one model and batch size."""
    import onnxruntime as ort
    import torch

    import dualgraph as dg
    torch.set_num_threads(threads)
    dg.set_num_threads(threads)
    x = example(name, batch, np.random.default_rng(0))
    reference = MODELS[name](torch).eval()
    state = random_state(reference, 0)
    reference.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    model = MODELS[name](dg).eval()
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    path = os.path.join(tmp, f"{name}_{batch}.onnx")
    with torch.no_grad():
        torch.onnx.export(reference, (torch.tensor(x),), path, dynamo=False,
                          input_names=["x"])
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    loaded = dg.onnx.load(path)
    compiled = dg.compile(model)
    tx, dx = torch.tensor(x), dg.tensor(x)

    def run_compiled():
        with dg.no_grad():
            return compiled(dx).numpy()

    def run_torch():
        with torch.no_grad():
            return reference(tx).numpy()
    calls = {"onnxruntime": lambda: session.run(None, {"x": x})[0],
             "dg_compiled": run_compiled,
             "dg_onnx_load": lambda: np.asarray(loaded(dx).numpy()),
             "torch_eager": run_torch}
    return {k: (f, f()) for k, f in calls.items()}


def measure(name: str, batch: int, threads: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        impls = implementations(name, batch, threads, tmp)
    want = impls["torch_eager"][1]
    cpu = {k: np.inf for k in impls}
    wall = dict(cpu)
    for _ in range(rounds):
        for k, (call, _) in impls.items():
            c, w = time.process_time(), time.perf_counter()
            call()
            cpu[k] = min(cpu[k], time.process_time() - c)
            wall[k] = min(wall[k], time.perf_counter() - w)
    error = {k: float(np.abs(out - want).max() / max(1e-6, np.abs(want).max()))
             for k, (_, out) in impls.items()}
    return {k: dict(cpu_ms=round(1e3 * cpu[k], 2), wall_ms=round(1e3 * wall[k], 2),
                    vs_onnxruntime=round(cpu[k] / cpu["onnxruntime"], 2),
                    rel_error=f"{error[k]:.1e}") for k in impls}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="vit,encoder")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, "
          f"{args.threads} thread(s) per engine", flush=True)
    for name in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            for engine, row in measure(name, batch, args.threads, args.rounds).items():
                print(f"{name} batch {batch} {engine}: {row}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
