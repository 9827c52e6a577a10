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
to onnxruntime's CPU time (``unseen_cnns.compare``). Outputs are compared with torch's.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile


def _threads(argv) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--threads", type=int, default=1)
    return parser.parse_known_args(argv)[0].threads


if __name__ == "__main__":   # before NumPy loads OpenBLAS
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "DUALGRAPH_NUM_THREADS"):
        os.environ[_name] = str(_threads(sys.argv[1:]))

import numpy as np  # noqa: E402

from .common import random_state  # noqa: E402
from .unseen_cnns import compare, engines  # noqa: E402  (after NumPy: it sets 1 thread)


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
    return engines(reference, model, x, os.path.join(tmp, f"{name}_{batch}.onnx"), threads)


def measure(name: str, batch: int, threads: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        return compare(implementations(name, batch, threads, tmp), rounds)


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
